package retryfuse

import (
	"net/http"
	"strconv"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/honour"
	"github.com/retryfuse/retryfuse/internal/keymemory"
)

// This file is the client's side of a server that honours Idempotency-Key
// (package idempotency is such a server's middleware; internal/honour
// reads its marker and its answers) as a call meets it: whether a scope is
// known to honour keys (declared, or learnt from a marker on its
// responses, for a bounded time), and what its answers do to a keyed
// write. Known to honour keys, a scope may be sent an uncertain keyed
// write again, with the same key and body (decision contract version 2):
// the server answers with the stored result or runs it once; the write
// stays uncertain until an answer settles it.

// The names of PolicyInfo.Policy and PolicyInfo.Action for what a scope
// is known of its server's keys.
const (
	policyServerKeys = "server_keys"
	actionConfirmed  = "confirmed"
	actionRevoked    = "revoked"
)

// serverHonoursKeys reports whether the call's server is known to honour
// Idempotency-Key: seen in a marked response of the scope, for ever when
// declared (KeyPolicy.ServerHonours), else within the memory; and not revoked
// since.
func (c *call) serverHonoursKeys() bool {
	if !c.key.present || (!c.p.honoursKeys && c.p.honourMemory <= 0) {
		return false
	}
	st, err := c.scopeRecord()
	return err == nil && st.honour.Known(c.now())
}

// learnHonour notes what resp, the answer to a keyed request, says of its
// server's keys (honour.State.Learn): its marker confirms that the scope
// honours them, for the memory's length from now or for ever when
// declared; a keyed write answered by the server itself without it
// revokes what was known. A change is reported (Hooks.Policy,
// "server_keys").
func (c *call) learnHonour(resp *http.Response) {
	if resp == nil || !c.p.honoursKeys && c.p.honourMemory <= 0 {
		return
	}
	st, err := c.scopeRecord()
	if err != nil {
		return
	}
	switch st.honour.Learn(resp, !decide.IdempotentMethod(c.method), c.now(), c.p.honourMemory, c.p.honoursKeys) {
	case honour.Confirmed:
		if c.t.Hooks.Policy != nil {
			c.reportPolicy(PolicyInfo{Policy: policyServerKeys, Action: actionConfirmed})
		}
	case honour.Revoked:
		if c.t.Hooks.Policy != nil {
			c.reportPolicy(PolicyInfo{Policy: policyServerKeys, Action: actionRevoked, Why: "status " + strconv.Itoa(resp.StatusCode)})
		}
	}
}

// noteRepeated keeps, when the attempt a left the call's write uncertain
// and the verdict v lets it be repeated (the server honours keys), the
// reconcile error the call ends with unless an answer settles the write.
func (c *call) noteRepeated(a attempt, v decide.Verdict) {
	if v.Decision == decide.ReconcileRequired || decide.IdempotentMethod(c.method) {
		return
	}
	if a.outcome == decide.OutcomeUnknown || (a.outcome == decide.OutcomeTimeout && a.phase != decide.PhasePreWrite) {
		c.repeated = c.reconcileError(a.err)
	}
}

// stopUnsettled ends a call that repeated an uncertain write and stops
// (reason: its attempts, its budget or its deadline ran out; a brake) with
// no response since that settles it: a success or a final answer. The
// first attempts may have applied the write, and a 503 or a 409 answered
// to a repeat says nothing of them: the caller reconciles, as for a write
// never repeated, and the key is held. The response set aside, if any, is
// closed.
func (c *call) stopUnsettled(reason error, v decide.Verdict) (*http.Response, error) {
	c.giveUp(reason, v)
	rec := c.repeated
	rec.Attempts = c.attempt
	res := c.reconcile(rec)
	switch res.resolution {
	case resolutionApplied:
		drain(c.lastResp, 0)
		c.confirmed, c.notStored = true, true
		return res.resp, nil
	case resolutionNotApplied:
		// Known not to have happened: the call ends as its last attempt did.
		if c.lastResp != nil {
			return c.lastResp, nil
		}
		return nil, &RetryError{Reason: reason, Last: c.lastErr, Attempts: c.attempt}
	}
	drain(c.lastResp, 0)
	c.uncertain = true
	return nil, rec
}

// answeredUnknown ends a keyed write that the server refused because an
// earlier request under the key ended without a result (409 outcome
// unknown: a handler that panicked, a server that died mid-request): it
// may have been applied. When an attempt of this call before may have
// reached the server (it was uncertain, or written and answered: a
// handler that panicked behind a recoverer answering 500), that request
// may be the one, and this call's write is what the caller reconciles;
// otherwise the earlier call's is (Earlier: this call applied nothing).
// The key is held as for any uncertain write.
func (c *call) answeredUnknown() (*http.Response, error) {
	if c.repeated == nil && c.reachedBefore() {
		c.repeated = c.reconcileError(nil)
	}
	if c.repeated != nil {
		return c.stopUnsettled(ErrReconcileRequired, decide.Verdict{})
	}
	drain(c.lastResp, 0)
	c.giveUp(ErrReconcileRequired, decide.Verdict{})
	e := c.reconcileError(nil)
	e.Earlier, e.answered, e.scope = true, true, boundedScope(c.scopeName())
	e.Attempts, e.Phase, e.At = 0, decide.PhaseUnknown, time.Time{} // the server's, not known here
	if h := c.t.Hooks.Reconcile; h != nil {
		emit(h, ReconcileInfo{CallInfo: c.info(), Err: e, Resolution: resolutionUnknown})
	}
	c.uncertain = true
	return nil, e
}

// answeredNotStored ends a keyed write that the server answered with 409
// not stored: an earlier request under the key was applied, and its
// response was too large to keep. The write happened; there is nothing to
// replay: the key is held as applied (the Ledger's claim completed without
// a result, or the Transport's memory), so that a later call under it is
// not sent.
func (c *call) answeredNotStored() (*http.Response, error) {
	drain(c.lastResp, 0)
	c.applied = true // the Ledger's claim is completed as the call settles
	if c.memoized {
		c.t.keys.Remember(c.memo(), keymemory.Memo{Applied: true}, c.p.clock.Now()) // a later call gets ErrAlreadyApplied
	}
	return nil, c.refuseApplied(decide.Verdict{})
}

// reachedBefore reports whether an attempt of the call before the last may
// have reached the server: it was not refused before anything was written.
func (c *call) reachedBefore() bool {
	h := c.attempts()
	for _, a := range h[:max(0, len(h)-1)] {
		if a.Phase != decide.PhasePreWrite {
			return true
		}
	}
	return false
}
