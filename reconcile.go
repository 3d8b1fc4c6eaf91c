package retryfuse

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/honour"
	"github.com/retryfuse/retryfuse/internal/keymemory"
)

// This file is what becomes of a write whose outcome is uncertain. The
// Reconciler is asked about it, and the call ends with its reconcile
// error (what Resolve does with the key); a later call under the key is
// refused (an earlier uncertain call, a write known applied). Toward a
// server that honours Idempotency-Key (package idempotency is such a
// server's middleware; internal/honour reads its marker and its answers),
// the write may be sent again with the same key and body instead
// (decision contract version 2): the server answers with the stored
// result or runs it once. Whether a scope's server is known to do so is
// declared, or learnt from its marker for a bounded time; a write
// repeated toward it stays uncertain until an answer settles it, and the
// server's own answers that the key's earlier request ended without a
// result, or was applied with nothing kept to replay, end the call.

// A Reconciler is asked, when the decision core requires reconciliation,
// whether an uncertain write took effect — typically by looking the effect
// up by err.IdempotencyKey. It runs on the caller's goroutine with the
// caller's context, so its time counts against the caller's deadline. A
// request it sends through the same Transport is not repeated (the context
// carries no retry ownership, but keep lookups idempotent: a GET). A type
// with a method of this shape is passed as a method value.
//
// Its ctx is marked Reconciling: the throttle of new calls does not
// refuse the lookups it sends with it.
//
// It answers one of three ways:
//
//   - applied true, with resp the authoritative result (for example the
//     resource looked up by its idempotency key): the caller receives resp
//     and closes its body;
//   - applied false, with a nil resp and a nil error: the effect is known
//     not to have happened, and the request may be sent again through the
//     usual gates (request safety, attempts, budget, breaker, deadline);
//   - an error: the effect could not be established, and the
//     *ReconcileRequiredError goes back to the caller.
//
// Anything else — an error, a panic, applied without a response, a
// response without applied — counts as not established: the reconcile
// error goes back, never a replay.
//
// With a Ledger, an Applied call completes its key without a stored result
// (the lookup's response is not the write's own answer): later calls under
// the key get a *ReconcileRequiredError rather than the lookup replayed. A
// lookup sent through a Transport with the same Ledger must not carry the
// write's idempotency key: it would be refused as a conflict (another
// method and path); look the effect up by a query or a path instead.
type Reconciler func(ctx context.Context, rec *ReconcileRequiredError) (resp *http.Response, applied bool, err error)

// reconcileError builds the error for an uncertain write of this call,
// which the Reconcile hook reports (reconcile).
func (c *call) reconcileError(cause error) *ReconcileRequiredError {
	return &ReconcileRequiredError{
		Method:         c.method,
		URL:            c.redactedURL(),
		IdempotencyKey: c.key.value,
		KeyGenerated:   c.key.generated,
		Attempts:       c.attempt,
		Phase:          c.phase,
		At:             c.now(),
		Cause:          cause,
		honours:        c.honoursLater(),
		resolve:        c.resolver(),
	}
}

// resolver returns what Resolve does for the call's key: end the
// ledger's uncertain claim on it, or, without a ledger, update the
// Transport's memory. Nil when nothing is held under a key of the call.
func (c *call) resolver() func(ctx context.Context, applied bool) error {
	keys, clock := &c.t.keys, c.p.clock
	switch {
	case c.ledgerKey != "":
		l, key, token := c.p.ledger, c.ledgerKey, c.ledgerToken
		if token == "" {
			token = c.heldToken
		}
		if token == "" {
			return nil
		}
		return func(ctx context.Context, applied bool) error {
			ctx, cancel := ledgerStepContext(ctx)
			defer cancel()
			var err error
			if applied {
				err = l.Complete(ctx, key, token, nil)
			} else {
				err = l.Release(ctx, key, token)
			}
			if err == nil {
				keys.Forget(key) // what was kept to describe the uncertain call
			}
			return err
		}
	case c.memoized:
		// The hold it frees is the one the error is about (the earlier
		// call's, or this call's, remembered as it ends): not one that a
		// later call's uncertain write put in its place since, as a
		// Ledger's token would not end a later claim.
		key := c.memo()
		if c.heldGen == nil {
			c.heldGen = new(atomic.Uint64) // set by rememberUncertain
		}
		gen := c.heldGen
		return func(_ context.Context, applied bool) error {
			if applied {
				keys.Remember(key, keymemory.Memo{Applied: true}, clock.Now())
			} else {
				keys.ForgetIf(key, gen.Load())
			}
			return nil
		}
	}
	return nil
}

// refuseUncertain returns a reconcile error about an earlier call under
// the key, whose write was left uncertain: this call sent nothing. The
// Reconciler is not asked (that call's own reconciliation was the time to
// ask); the Reconcile hook reports it.
func (c *call) refuseUncertain() *ReconcileRequiredError {
	e := c.reconcileError(nil)
	e.Earlier, e.scope = true, boundedScope(c.scopeName())
	e.Attempts, e.Phase, e.At = c.earlier.Attempts, c.earlier.Phase, c.earlier.At // zero: unknown
	if h := c.t.Hooks.Reconcile; h != nil {
		c.hookPanicked("Hooks.Reconcile", emit(h, ReconcileInfo{CallInfo: c.info(), Err: e, Resolution: resolutionUnknown}))
	}
	return e
}

// refuseApplied refuses a call under a key that an earlier call applied,
// when no result of it is kept to replay.
func (c *call) refuseApplied(v decide.Verdict) error {
	c.giveUp(ErrAlreadyApplied, v)
	return &RetryError{Reason: ErrAlreadyApplied, Attempts: c.attempt, about: c.about()}
}

// about names the call's request and key, for a refusal under the key:
// the method, the URL without credentials, the key and its scope. The key
// is at most 255 bytes (a longer one is refused before), and the scope is
// cut to maxScopeInError bytes.
func (c *call) about() string {
	return c.method + " " + c.redactedURL() + ", idempotency key " + strconv.Quote(c.key.value) + " in scope " + boundedScope(c.scopeName())
}

// maxScopeInError bounds a scope named in an error: a Scope function may
// return a long name.
const maxScopeInError = 128

// boundedScope returns scope cut to maxScopeInError bytes, marked when cut.
func boundedScope(scope string) string {
	if len(scope) > maxScopeInError {
		return strings.ToValidUTF8(scope[:maxScopeInError], "") + "…"
	}
	return scope
}

// The answers a reconciliation reports (ReconcileInfo.Resolution).
const (
	resolutionUnknown    = "still_unknown"
	resolutionApplied    = "applied"
	resolutionNotApplied = "not_applied"
)

// reconciliation is what the Reconciler established.
type reconciliation struct {
	resolution string // one of the resolution constants
	resp       *http.Response
}

// reconcile asks the Reconciler, if any, about an uncertain write, with the
// caller's own context (its time counts against the caller's deadline; it
// carries no retry ownership, so its own requests are not passed through).
func (c *call) reconcile(e *ReconcileRequiredError) reconciliation {
	res := reconciliation{resolution: resolutionUnknown}
	if c.p.reconciler != nil {
		res = askReconciler(Reconciling(c.req.Context()), c.p.reconciler, e)
	}
	if h := c.t.Hooks.Reconcile; h != nil {
		c.hookPanicked("Hooks.Reconcile", emit(h, ReconcileInfo{CallInfo: c.info(), Err: e, Resolution: res.resolution}))
	}
	return res
}

// askReconciler consults r, recovering a panic; anything but a usable
// answer leaves the outcome unknown.
func askReconciler(ctx context.Context, r Reconciler, e *ReconcileRequiredError) (res reconciliation) {
	var resp *http.Response
	defer func() {
		if recover() != nil {
			drain(resp, 0)
			res = reconciliation{resolution: resolutionUnknown}
		}
	}()
	resp, applied, err := r(ctx, e)
	switch {
	case err == nil && applied && resp != nil:
		return reconciliation{resolution: resolutionApplied, resp: resp}
	case err == nil && !applied && resp == nil:
		return reconciliation{resolution: resolutionNotApplied}
	}
	drain(resp, 0) // not a usable answer: release it
	return reconciliation{resolution: resolutionUnknown}
}

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

// honoursLater returns, when the call's server is known to honour
// Idempotency-Key now, what tells whether it still is at a later time (a
// Repeat's): its scope's record is still the Transport's, and knows it at
// that time (neither expired nor revoked since). Nil when it is not known
// now, or the key is generated.
func (c *call) honoursLater() func() bool {
	if c.key.generated || !c.serverHonoursKeys() {
		return nil
	}
	scopes, st, clock := &c.t.scopes, c.st, c.p.clock
	return func() bool { return scopes.holds(st) && st.honour.Known(clock.Now()) }
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
		c.hookPanicked("Hooks.Reconcile", emit(h, ReconcileInfo{CallInfo: c.info(), Err: e, Resolution: resolutionUnknown}))
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
