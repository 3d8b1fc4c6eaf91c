package retryfuse

import (
	"context"
	"net/http"
	"time"

	"github.com/retryfuse/retryfuse/decide"
)

// call is the state of one RoundTrip: the facts about the request, the
// attempt history the decision core reads, and the last result.
type call struct {
	t           *Transport
	p           *policy
	req         *http.Request
	ctx         context.Context // the caller's context, marked as owned
	start       time.Time
	id          uint64
	passThrough bool // a retryfuse Transport above owns the repeating

	method string
	key    requestKey
	facts  decide.Request
	header http.Header // the header to send when it differs from req.Header
	url    string      // redacted, computed on first use
	scope  string      // the dependency, for the breaker and the ledger; see scopeName
	budget Budget
	owned  ownedContext
	trace  attemptTrace

	attempt  int
	phase    decide.Phase
	history  []decide.Attempt
	histBuf  [4]decide.Attempt
	lastResp *http.Response
	lastErr  error

	// The key ledger's claim, when the call owns its key.
	ledgerKey        string
	ledgerToken      string
	earlierUncertain bool // an earlier call under the key ended uncertain
	confirmed        bool // the call ends with a confirmed result
	notStored        bool // ... whose response is not to be stored for replay
	uncertain        bool // the call ends with an uncertain write
	settled          bool // settle has run
}

func (c *call) run() (*http.Response, error) {
	req := c.req
	c.method = req.Method
	if c.method == "" {
		c.method = http.MethodGet
	}
	key, err := readKey(req.Header)
	if err != nil {
		closeRequestBody(req)
		return nil, err
	}
	c.key = key
	generate := c.t.GenerateIdempotencyKeys && !key.present &&
		(c.method == http.MethodPost || c.method == http.MethodPatch)
	if generate {
		v, err := newIdempotencyKey()
		if err != nil {
			closeRequestBody(req)
			return nil, err
		}
		c.key = requestKey{value: v, present: true, generated: true}
	}
	if generate || needsKeyHiding(c.method, req.Header) {
		gen := ""
		if generate {
			gen = c.key.value
		}
		c.header = hideKey(req.Header, gen)
	}
	c.facts = decide.Request{Method: c.method, IdempotencyKey: c.key.present, ReplayableBody: replayableBody(req)}
	c.history = c.histBuf[:0]
	c.ctx = req.Context()
	if !c.passThrough {
		c.owned = ownedContext{Context: c.ctx, owner: c.t}
		c.ctx = &c.owned // no allocation: it lives in the call
	}
	if err := c.ctx.Err(); err != nil {
		closeRequestBody(req)
		return nil, err // no attempt starts after the deadline
	}

	ks, stored, err := c.claim()
	if err != nil {
		closeRequestBody(req)
		return nil, err
	}
	if c.ledgerToken != "" {
		defer c.settleOnPanic()
	}
	if v := c.decide(ks); v.Decision != decide.ReplaySafe {
		closeRequestBody(req)
		return c.refuse(v, stored)
	}
	if !c.passThrough {
		if err := c.recordRequest(); err != nil {
			closeRequestBody(req)
			c.settle(nil, err)
			return nil, err
		}
	}
	resp, err := c.loop()
	return c.settle(resp, err)
}

// loop makes attempts until one is final, the decision core or a gate
// stops the call, or attempts run out.
func (c *call) loop() (*http.Response, error) {
	for {
		// No attempt starts after the deadline, however long the gates
		// before it took (a remote ledger or budget, a hook).
		if err := c.req.Context().Err(); err != nil {
			if c.attempt == 0 {
				closeRequestBody(c.req)
				c.giveUp(err, decide.Verdict{})
				return nil, err
			}
			return c.stop(err, decide.Verdict{})
		}
		ticket, berr := c.admit()
		if berr != nil {
			if c.attempt == 0 {
				closeRequestBody(c.req)
				c.giveUp(ErrCircuitOpen, decide.Verdict{})
				return nil, berr
			}
			return c.stop(berr, decide.Verdict{})
		}
		c.attempt++
		resp, r, ok, err := c.sendAdmitted(ticket)
		if !ok {
			ticket.done(observeIgnore, nil)
			return resp, err // the body could not be replayed
		}
		c.observe(ticket, resp, err, r)
		c.phase = r.phase
		cost := 1.0
		if r.outcome == decide.OutcomeTimeout {
			cost = c.p.timeoutCost
		}
		c.history = append(c.history, decide.Attempt{Outcome: r.outcome, Phase: contractPhase(r.phase), Cost: cost})
		c.lastResp, c.lastErr = resp, err

		v := c.decide(decide.KeyNone)
		switch {
		case c.passThrough:
			return resp, err // the Transport above decides
		case v.Decision == decide.ReplayStored:
			c.confirmed = true
			return resp, err
		case v.Decision == decide.ReconcileRequired:
			rec := c.reconcileError(err)
			res := c.reconcile(rec)
			switch res.Resolution {
			case Applied:
				// Completed — but the authoritative response is the
				// Reconciler's lookup, not this request's own answer: it is
				// not stored to replay as if it were.
				c.confirmed, c.notStored = true, true
				return res.Response, nil
			case NotApplied:
				// The effect is now known not to have happened: a
				// definite failure, which may be sent again through the
				// usual gates.
				c.history[len(c.history)-1].Outcome = decide.OutcomeFailure
				if !r.retryable {
					c.giveUp(errFinal, decide.Verdict{})
					return nil, err
				}
				if v = c.decide(decide.KeyNone); v.Decision == decide.ReplaySafe {
					break // to the gates below
				}
				return c.stop(brakeReason(v), v)
			default:
				c.uncertain = true
				return nil, rec
			}
		case !r.retryable:
			c.giveUp(errFinal, decide.Verdict{})
			return resp, err
		case v.Decision != decide.ReplaySafe:
			return c.stop(brakeReason(v), v)
		}
		if c.attempt >= c.p.maxAttempts {
			return c.stop(ErrAttemptsExhausted, decide.Verdict{})
		}
		if resp, err, retry := c.backoff(); !retry {
			return resp, err
		}
	}
}

// sendAdmitted makes the attempt that the breaker admitted with ticket.
// Should the attempt panic (in the base), the ticket is done on the way up:
// a probe that never gave its slot back would keep a half-open scope
// refusing every request for good.
func (c *call) sendAdmitted(ticket breakerTicket) (resp *http.Response, r result, ok bool, err error) {
	returned := false
	defer func() {
		if !returned {
			ticket.done(observeIgnore, nil)
		}
	}()
	resp, r, ok, err = c.send()
	returned = true
	return resp, r, ok, err
}

// decide asks the decision core about the call as it stands.
func (c *call) decide(ks decide.KeyState) decide.Verdict {
	v := decide.Decide(decide.Input{Policy: c.p.decision, Request: c.facts, KeyState: ks, Attempts: c.history})
	if h := c.t.Hooks.Decision; h != nil {
		emit(h, DecisionInfo{CallInfo: c.info(), Verdict: v, KeyState: ks})
	}
	return v
}

// contractPhase maps a phase to the contract's: a response was written.
func contractPhase(p decide.Phase) decide.Phase {
	if p == decide.PhaseResponse {
		return decide.PhasePostWrite
	}
	return p
}

// brakeReason names the sentinel for a verdict that stops a call.
func brakeReason(v decide.Verdict) error {
	switch v.Rule {
	case 1:
		return ErrIdempotencyConflict
	case 4:
		return ErrDuplicateInFlight
	case 5:
		return ErrNotRepeatable
	case 6:
		return ErrFailureThreshold
	case 7:
		return ErrCostBudget
	}
	return ErrNotRepeatable
}

// refuse answers a call that the decision core stops before its first
// attempt: a stored result is replayed; a refusal is an error.
func (c *call) refuse(v decide.Verdict, stored *StoredResponse) (*http.Response, error) {
	if v.Decision == decide.ReplayStored {
		if stored == nil {
			// Completed, but its result was too large to keep: the caller
			// must look it up rather than have it sent again.
			return nil, c.refuseUncertain(ErrResultNotStored)
		}
		return storedResponse(stored, c.req), nil
	}
	if v.Decision == decide.Brake && v.Rule == 4 && c.earlierUncertain {
		return nil, c.refuseUncertain(ErrEarlierUncertain)
	}
	reason := brakeReason(v)
	c.giveUp(reason, v)
	return nil, &RetryError{Reason: reason}
}

// stop ends a call that may not go on: the last response goes back as it
// is, or, without one, an error carrying reason and the last error.
func (c *call) stop(reason error, v decide.Verdict) (*http.Response, error) {
	c.giveUp(reason, v)
	if c.lastResp != nil {
		return c.lastResp, nil
	}
	return nil, &RetryError{Reason: reason, Last: c.lastErr, Attempts: c.attempt}
}

func (c *call) giveUp(reason error, v decide.Verdict) {
	h := c.t.Hooks.GiveUp
	if h == nil {
		return
	}
	info := GiveUpInfo{CallInfo: c.info(), Reason: reason, Verdict: v, Err: c.lastErr}
	if c.lastResp != nil {
		info.StatusCode = c.lastResp.StatusCode
	}
	emit(h, info)
}

// reconcileError builds the error for an uncertain write. The Reconcile
// hook reports it: reconcile, for a write of this call; refuseUncertain,
// for a key left uncertain or unreplayable by an earlier call.
func (c *call) reconcileError(cause error) *ReconcileRequiredError {
	e := &ReconcileRequiredError{
		Method:         c.method,
		URL:            c.redactedURL(),
		IdempotencyKey: c.key.value,
		KeyGenerated:   c.key.generated,
		Attempts:       c.attempt,
		Phase:          c.phase,
		Cause:          cause,
	}
	return e
}

// refuseUncertain returns a reconcile error about an earlier call under
// the key, without asking the Reconciler (that call's own reconciliation
// was the time to ask), and reports it.
func (c *call) refuseUncertain(cause error) *ReconcileRequiredError {
	e := c.reconcileError(cause)
	if h := c.t.Hooks.Reconcile; h != nil {
		emit(h, ReconcileInfo{CallInfo: c.info(), Err: e, Resolution: StillUnknown})
	}
	return e
}

// reconcile asks the Reconciler, if any, about an uncertain write, with the
// caller's own context (its time counts against the caller's deadline; it
// carries no retry ownership, so its own requests are not passed through).
func (c *call) reconcile(e *ReconcileRequiredError) Reconciliation {
	var res Reconciliation
	if c.t.Reconciler != nil {
		res = askReconciler(c.req.Context(), c.t.Reconciler, e)
	}
	if h := c.t.Hooks.Reconcile; h != nil {
		emit(h, ReconcileInfo{CallInfo: c.info(), Err: e, Resolution: res.Resolution})
	}
	return res
}

// scopeName returns the call's scope, computed on first use.
func (c *call) scopeName() string {
	if c.scope == "" {
		c.scope = c.t.scope(c.req)
	}
	return c.scope
}

func (c *call) redactedURL() string {
	if c.url == "" {
		c.url = redactURL(c.req.URL, c.p.redact)
	}
	return c.url
}

// info returns the CallInfo of the call's current attempt.
func (c *call) info() CallInfo {
	return CallInfo{
		Context:        c.req.Context(),
		CallID:         c.id,
		Attempt:        c.attempt,
		Method:         c.method,
		URL:            c.redactedURL(),
		IdempotencyKey: c.key.value,
		KeyGenerated:   c.key.generated,
		Phase:          c.phase,
		Elapsed:        c.t.clock().Sub(c.start),
	}
}
