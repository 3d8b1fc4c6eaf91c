package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/honour"
	"github.com/retryfuse/retryfuse/internal/keymemory"
	"github.com/retryfuse/retryfuse/internal/share"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is one RoundTrip: the gates before the first attempt, and the
// loop of attempts (the facts about the request are read in
// idempotency_key.go, the verdicts and the wait are retry.go's). Only run
// and loop end a call; the steps they call (send, schedule, wait, the
// gates) report what happened and leave the ending to them.

// call is the state of one RoundTrip: the facts about the request, the
// attempt history the decision core reads, and the last result.
type call struct {
	t           *Transport
	p           *policy
	req         *http.Request
	ctx         context.Context // the caller's context
	start       time.Time       // with hooks, when the call began
	at          time.Time       // the clock's reading for the current step; see now
	id          uint64
	passThrough bool          // a retryfuse Transport above owns the repeating
	flight      *share.Flight // the shared read this call makes, if it is one; see deadline

	method  string
	key     requestKey
	facts   decide.Request
	header  http.Header // the header to send when it differs from req.Header
	url     string      // redacted, computed on first use
	scope   string      // the dependency, for the breaker and the ledger; see scopeName
	bscope  string      // with Brake.Route, the scope at the breaker; see breakerScopeName
	budget  budget.Budget
	deposit timedBudget  // the budget still to be told of the first attempt; see recordRequest
	st      *scopeRecord // the scope's record; see scopeRecord
	w       *wire        // what outlives the call; the rest of it stays on the stack
	copied  bool         // w.first is taken

	attempt  int // attempts made
	resent   int // requests the base re-sent by itself within them
	phase    decide.Phase
	hist     [4]decide.Attempt // the history the decision core reads, while it fits
	nhist    int
	history  []decide.Attempt // the history, once it outgrows hist
	lastResp *http.Response
	lastErr  error

	// The key ledger's claim, when the call owns its key.
	ledgerKey        string
	ledgerToken      string
	heldToken        string              // with earlierUncertain, the token that may end that claim
	memoKey          string              // without a ledger, the key in the Transport's memory; see memo
	memoized         bool                // the key is the Transport's memory's to keep
	heldGen          *atomic.Uint64      // without a ledger, the Gen of the hold the call's reconcile error is about (see resolver)
	credsBound       bool                // the ledger's fingerprints hold the credentials requests carry
	earlierUncertain bool                // an earlier call under the key ended uncertain
	earlier          keymemory.Uncertain // what is known of it
	confirmed        bool                // the call ends with a confirmed result
	notStored        bool                // ... whose response is not to be stored for replay
	uncertain        bool                // the call ends with an uncertain write
	applied          bool                // the server said the key's write was applied, its result not kept
	settled          bool                // settle has run
	gaveUp           error               // the reason the call gave up, if it did

	repeated *ReconcileRequiredError // an uncertain write repeated, not settled since; see honour.go
}

// wire is the part of a call that net/http, the response or the caller
// may still hold when RoundTrip has returned: the contexts, the trace and
// the first attempt's copy of the request. It is apart so that the call
// itself, which nothing keeps, can live on the stack: the memory a call
// allocates is memory the cache has not seen, and costs more than the
// instructions that fill it.
//
// It is kept within 512 bytes, the largest size class the runtime
// allocates without a header of the object's layout; a test holds it there
// (TestWireFitsItsSizeClass).
type wire struct {
	trace attemptTrace // the first attempt's, and its context
	first http.Request // the first attempt's copy of req
	gate  resendGate   // admits the base's own re-sends; see resend.go
}

// run reads the facts about the request, passes the gates that come before
// the first attempt (the caller's deadline, the ledger, the decision core,
// the budget) and then makes attempts. The claim on a ledger key is settled
// on every way out.
func (c *call) run() (*http.Response, error) {
	req := c.req
	if err := c.readFacts(); err != nil {
		closeRequestBody(req)
		return nil, err
	}
	if err := c.ctx.Err(); err != nil {
		closeRequestBody(req)
		return nil, err // no attempt starts after the deadline
	}

	// Only a keyed call has a key to claim (ledger_gate.go).
	ks, stored := decide.KeyNone, (*ledger.StoredResponse)(nil)
	if c.key.present {
		var err error
		if ks, stored, err = c.claim(); err != nil {
			closeRequestBody(req)
			return nil, err
		}
	}
	if c.ledgerToken != "" {
		defer c.settleOnPanic()
	}
	// Before any attempt, with nothing known of the key, the decision
	// core's answer is replay_safe whatever the request (a policy's brakes
	// are positive): it is not asked, and nothing is reported
	// (TestNothingStopsAFirstAttemptWithAFreeKey pins this).
	if ks != decide.KeyNone {
		if v := c.decide(ks); v.Decision != decide.ReplaySafe {
			closeRequestBody(req)
			return c.refuse(v, stored)
		}
	}
	if !c.passThrough {
		// The scope's record, found once, for the gates that read it: the
		// throttle, and the budget when each scope has its own.
		if c.p.throttle || c.p.pace || c.p.budget == nil {
			if _, err := c.scopeRecord(); err != nil {
				closeRequestBody(req)
				return c.settle(nil, err)
			}
		}
		if err := c.admitCall(); err != nil {
			closeRequestBody(req)
			return c.settle(nil, err)
		}
		c.recordRequest()
	}
	resp, err := c.loop()
	c.depositRequest() // when no attempt was made
	if c.uncertain && (c.memoized || c.ledgerToken != "") {
		c.rememberUncertain()
	}
	if c.ledgerToken == "" {
		return resp, err // no claim to settle
	}
	return c.settle(resp, err)
}

// loop makes attempts until one is final, the decision core or a gate
// stops the call, or attempts run out. Each turn: the deadline, the
// breaker, the attempt, the decision core's verdict on it, and, for a
// retry, its schedule and the wait.
func (c *call) loop() (*http.Response, error) {
	for {
		// No attempt starts after the deadline, however long the gates
		// before it took (a remote ledger or budget, a hook).
		if err := c.req.Context().Err(); err != nil {
			return c.stopBefore(err, err)
		}
		if c.attempt > 0 {
			c.step() // the first attempt takes the reading of the gates before it
		}
		ps, err := c.enter(false)
		if err != nil {
			return c.stopBefore(err, err)
		}
		var a attempt
		if c.p.hedge.max > 0 && c.hedges() {
			a, err = c.sendHedged(ps)
		} else {
			a, err = c.send(ps)
		}
		c.depositRequest()
		if err != nil {
			// The body cannot be sent again. Last stays the last attempt's
			// error, and GetBody's goes beside it.
			if c.lastResp == nil {
				c.lastErr = errors.Join(c.lastErr, err)
			}
			return c.stop(ErrNotRepeatable, decide.Verdict{})
		}
		c.record(a)
		c.chargeResends(a)
		switch {
		case c.passThrough:
			return a.resp, a.err // the Transport above decides
		case a.keyed == honour.AnswerUnknown:
			return c.answeredUnknown()
		case a.keyed == honour.AnswerNotStored:
			return c.answeredNotStored()
		case a.keyed == honour.AnswerReused:
			// The server refused the key, used before with another payload:
			// nothing was run, and nothing will be under this key.
			drain(a.resp, 0)
			return nil, c.refuseConflict(decide.Verdict{}, true)
		case a.outcome == decide.OutcomeSuccess:
			// A confirmed result ends the call: nothing to ask the decision
			// core (it would answer replay_stored, rule 2).
			c.confirmed = true
			return a.resp, a.err
		}

		v := c.decide(decide.KeyNone)
		c.noteRepeated(a, v)
		switch {
		case v.Decision == decide.ReplayStored:
			c.confirmed = true
			return a.resp, a.err
		case v.Decision == decide.ReconcileRequired:
			rec := c.reconcileError(a.err)
			switch res := c.reconcile(rec); res.resolution {
			case resolutionApplied:
				// Completed — but the authoritative response is the
				// Reconciler's lookup, not this request's own answer: it is
				// not stored to replay as if it were.
				c.confirmed, c.notStored = true, true
				return res.resp, nil
			case resolutionNotApplied:
				// The effect is known not to have happened: a definite
				// failure, which may be sent again through the usual gates.
				h := c.attempts()
				h[len(h)-1].Outcome = decide.OutcomeFailure
				if !a.retryable {
					c.giveUp(c.finalReason(), decide.Verdict{})
					return nil, a.err
				}
				v = c.decide(decide.KeyNone)
			default:
				c.uncertain = true
				return nil, rec
			}
		case !a.retryable && a.resp == nil && c.repeated != nil:
			return c.stopUnsettled(c.finalReason(), decide.Verdict{})
		case !a.retryable:
			c.giveUp(c.finalReason(), decide.Verdict{})
			return a.resp, a.err
		}
		if a.stopped != nil { // the share of the attempt ran out within it
			return c.stop(a.stopped, decide.Verdict{})
		}
		if v.Decision != decide.ReplaySafe {
			return c.stop(brakeReason(v), v)
		}
		if c.attempt+c.resent >= c.p.maxAttempts {
			return c.stop(ErrAttemptsExhausted, decide.Verdict{})
		}
		next, err := c.schedule()
		if err != nil {
			return c.stop(err, decide.Verdict{})
		}
		if err := c.wait(next.delay); err != nil {
			if c.repeated != nil {
				return c.stopUnsettled(err, decide.Verdict{})
			}
			c.giveUp(err, decide.Verdict{})
			// The set-aside response is not handed back: the caller stopped
			// waiting for it. Its status stays reachable through Last.
			return nil, &RetryError{Reason: err, Last: next.cause, Attempts: c.attempt}
		}
	}
}

// refuse answers a call that the decision core stops before its first
// attempt: a stored result is replayed; a refusal is an error.
func (c *call) refuse(v decide.Verdict, stored *ledger.StoredResponse) (*http.Response, error) {
	if v.Decision == decide.ReplayStored {
		if stored == nil {
			// Completed, but no result of it is kept: the caller must look
			// it up rather than have it sent again.
			return nil, c.refuseApplied(v)
		}
		return storedResponse(stored, c.req), nil
	}
	if v.Rule == decide.RuleInFlight && c.earlierUncertain {
		return nil, c.refuseUncertain()
	}
	if v.Rule == decide.RuleConflict {
		return nil, c.refuseConflict(v, false)
	}
	reason := brakeReason(v)
	c.giveUp(reason, v)
	e := &RetryError{Reason: reason}
	if v.Rule == decide.RuleInFlight || v.Rule == decide.RuleConflict {
		e.about = c.about() // a refusal under the key names it
	}
	return nil, e
}

// stopBefore ends the call with err when the next attempt may not start:
// before the first, with err itself (the request's body is closed, and the
// hooks hear reason); after it, as stop does.
func (c *call) stopBefore(err, reason error) (*http.Response, error) {
	if c.attempt > 0 {
		return c.stop(err, decide.Verdict{})
	}
	closeRequestBody(c.req)
	c.giveUp(reason, decide.Verdict{})
	return nil, err
}

// stop ends a call that may not go on: the last response goes back as it
// is, or, without one, an error carrying reason and the last error.
func (c *call) stop(reason error, v decide.Verdict) (*http.Response, error) {
	if c.repeated != nil {
		return c.stopUnsettled(reason, v)
	}
	c.giveUp(reason, v)
	if c.lastResp != nil {
		return c.lastResp, nil
	}
	return nil, &RetryError{Reason: reason, Last: c.lastErr, Attempts: c.attempt}
}

// finalReason is the reason a call ends on a result that is not retried:
// the caller's own cancellation or deadline when that is why, else
// errFinal.
func (c *call) finalReason() error {
	if err := c.req.Context().Err(); err != nil {
		return err
	}
	return errFinal
}

func (c *call) giveUp(reason error, v decide.Verdict) {
	c.gaveUp = reason
	h := c.t.Hooks.GiveUp
	if h == nil {
		return
	}
	info := GiveUpInfo{CallInfo: c.info(), Reason: reason, Verdict: v, Err: c.lastErr}
	if c.lastResp != nil {
		info.StatusCode = c.lastResp.StatusCode
	}
	c.hookPanicked("Hooks.GiveUp", emit(h, info))
}

// scopeName returns the call's scope, computed on first use.
func (c *call) scopeName() string {
	if c.scope == "" && c.p.keepsScopes() {
		// The scope's record has the name, built once for every call.
		if _, err := c.scopeRecord(); err == nil {
			return c.scope
		}
	}
	if c.scope == "" {
		c.scope = c.p.scopeOf(c.req)
	}
	return c.scope
}

// closeRequestBody closes the body of a request that will not be sent
// (again), as a RoundTripper must.
func closeRequestBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}
