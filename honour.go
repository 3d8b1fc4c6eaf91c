package retryfuse

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/keymemory"
)

// This file is the client's side of a server that honours Idempotency-Key
// (package idempotency is such a server's middleware): whether a scope is
// known to honour keys (declared, or learnt from a marker on its
// responses, for a bounded time), and what its answers mean for a keyed
// request: a 409 while the first request under the key runs is retried; a
// 422 for a key reused with another payload is the conflict error; a
// replayed response is reported as one. Known to honour keys, a scope may
// be sent an uncertain keyed write again, with the same key and body
// (decision contract version 2): the server answers with the stored result
// or runs it once.

// The headers of a server that honours keys (package idempotency).
const (
	// headerHonoured on a response says that its server honours
	// Idempotency-Key: "?1", a Structured Field Boolean.
	headerHonoured = "Idempotency-Key-Honoured"
	// headerReplayed on a response says that it is the stored response of
	// an earlier request under the key: "true".
	headerReplayed = "Idempotent-Replayed"
)

// The problem types (RFC 9457) by which such a server refuses a keyed
// request, matched by their fragment.
const (
	problemInFlight = "#ProblemInFlight"       // 409: the first request under the key still runs
	problemReused   = "#ProblemKeyReused"      // 422: the key was used with another payload
	problemUnknown  = "#ProblemOutcomeUnknown" // 409: an earlier request under the key ended without a result
	problemNotStord = "#ProblemNotStored"      // 409: applied, its response too large to store
)

// defaultHonourMemory is how long a scope is taken to honour keys after a
// response that says so, when Transport.HonourMemory is zero.
const defaultHonourMemory = 10 * time.Minute

// honour is what a scope's record knows of its server's keys: until when
// it is known to honour them (Unix nanoseconds of the Transport's clock; 0:
// not known; math.MaxInt64: declared, and confirmed).
type honour struct{ until atomic.Int64 }

// The names of PolicyInfo.Policy and PolicyInfo.Action for what a scope
// is known of its server's keys.
const (
	policyServerKeys = "server_keys"
	actionConfirmed  = "confirmed"
	actionRevoked    = "revoked"
)

// serverHonoursKeys reports whether the call's server is known to honour
// Idempotency-Key: seen in a marked response of the scope, for ever when
// declared (ServerHonoursKeys), else within the memory; and not revoked
// since.
func (c *call) serverHonoursKeys() bool {
	if !c.key.present || (!c.p.honoursKeys && c.p.honourMemory <= 0) {
		return false
	}
	st, err := c.scopeRecord()
	return err == nil && st.honour.until.Load() > c.now().UnixNano()
}

// learnHonour notes what resp, the answer to a keyed request, says of its
// server's keys. Its marker confirms that the scope honours them: for the
// memory's length from now, or for ever when declared. A response to a
// keyed write without the marker, from the server itself (not a 5xx, 408
// or 429, which a proxy in front answers as often), revokes what was
// known: a server that no longer honours keys (a deployment without the
// middleware, or a route it does not handle) must not be sent an
// uncertain write again. A change is reported (Hooks.Policy,
// "server_keys").
func (c *call) learnHonour(resp *http.Response) {
	if resp == nil || !c.p.honoursKeys && c.p.honourMemory <= 0 {
		return
	}
	st, err := c.scopeRecord()
	if err != nil {
		return
	}
	now := c.now()
	if resp.Header.Get(headerHonoured) == "?1" {
		until := int64(math.MaxInt64)
		if !c.p.honoursKeys {
			until = now.Add(c.p.honourMemory).UnixNano()
		}
		if prev := st.honour.until.Swap(until); prev <= now.UnixNano() && c.t.Hooks.Policy != nil {
			c.reportPolicy(PolicyInfo{Policy: policyServerKeys, Action: actionConfirmed})
		}
		return
	}
	code := resp.StatusCode
	if decide.IdempotentMethod(c.method) || code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests {
		return
	}
	if prev := st.honour.until.Swap(0); prev > now.UnixNano() && c.t.Hooks.Policy != nil {
		c.reportPolicy(PolicyInfo{Policy: policyServerKeys, Action: actionRevoked, Why: "status " + strconv.Itoa(code)})
	}
}

// keyedAnswer is what a keyed request's response means, from a server that
// honours keys.
type keyedAnswer uint8

const (
	answerPlain     keyedAnswer = iota // nothing of the key's
	answerInFlight                     // 409: the first request under the key still runs; retry it later
	answerReused                       // 422: the key was used with another payload
	answerUnknown                      // 409: an earlier request under the key may have been applied: reconcile
	answerNotStored                    // 409: applied, and no response is kept to replay
	answerReplayed                     // the stored response of the first request under the key: final
)

// maxProblemBytes bounds the problem details read to tell a refusal's
// type: such bodies are a few hundred bytes.
const maxProblemBytes = 4 << 10

// readKeyedAnswer tells what resp means for the keyed request that got it.
// A replayed response (Idempotent-Replayed: true, as this package's
// middleware and large payment APIs send it) is the first request's
// result, final whatever its status. Only a 409 or 422 from a server that
// says it honours keys, whose body is problem details, is read (at most
// maxProblemBytes; the body is given back whole): a handler's own 409 or
// 422 behind the same server is its result, not the key's.
func readKeyedAnswer(resp *http.Response) keyedAnswer {
	if replayed(resp) {
		return answerReplayed
	}
	if resp == nil || (resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusUnprocessableEntity) ||
		resp.Header.Get(headerHonoured) != "?1" || resp.Body == nil || resp.Body == http.NoBody {
		return answerPlain
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != "application/problem+json" {
		return answerPlain
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxProblemBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	if err != nil {
		return answerPlain
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(b, &p) != nil {
		return answerPlain
	}
	switch {
	case resp.StatusCode == http.StatusConflict && strings.HasSuffix(p.Type, problemInFlight):
		return answerInFlight
	case resp.StatusCode == http.StatusConflict && strings.HasSuffix(p.Type, problemUnknown):
		return answerUnknown
	case resp.StatusCode == http.StatusConflict && strings.HasSuffix(p.Type, problemNotStord):
		return answerNotStored
	case resp.StatusCode == http.StatusUnprocessableEntity && strings.HasSuffix(p.Type, problemReused):
		return answerReused
	}
	return answerPlain
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

// replayed reports whether resp is a stored response a server replayed.
func replayed(resp *http.Response) bool {
	return resp != nil && resp.Header.Get(headerReplayed) == "true"
}
