package retryfuse

import (
	"net/http"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/bulkhead"
	"github.com/retryfuse/retryfuse/internal/honour"
	"golang.org/x/time/rate"
)

// This file is admission: the gates an attempt passes before it is sent,
// in the order of the stack (see Transport) — the breaker, the rate
// limiter, the bulkhead — the pass an admitted attempt holds until it is
// over, its leaving (the bulkhead's slot freed and the learnt limit told
// first, then the breaker, then the throttle); the refusals are
// refusals.go's. The state they read is the scope's record (scopes.go),
// found once per call.

// pass is what an admitted attempt holds until it is over: the breaker's
// ticket and the bulkhead's slot, with what the learnt limit and the
// throttle read when it is over (overload.go).
type pass struct {
	ticket breaker.Ticket
	slot   *bulkhead.Bulkhead // nil without a slot
	sent   time.Time          // when the slot was taken
	load   int                // the attempts in flight then, its own included
	first  bool               // the call's first attempt
}

// enter lets the next attempt through the breaker, the rate limiter and
// the bulkhead, in that order. A hedge waits for none of them. A refusal
// gives back what the gates before it granted.
func (c *call) enter(hedge bool) (pass, error) {
	ticket, err := c.admit()
	if err != nil {
		return pass{}, err
	}
	ps := pass{ticket: ticket, first: c.attempt == 0 && !hedge}
	if l := c.limits(); l != nil {
		if err := c.rateLimit(l, hedge); err != nil {
			c.leave(ps, attempt{result: result{ignored: true}})
			return pass{}, err
		}
		if l.bulkhead != nil {
			load, sent, err := c.bulkhead(l, hedge)
			if err != nil {
				c.leave(ps, attempt{result: result{ignored: true}})
				return pass{}, err
			}
			ps.slot, ps.load, ps.sent = l.bulkhead, load, sent
		}
	}
	return ps, nil
}

// leave ends an attempt's pass, the stages it passed left innermost
// first: its bulkhead slot is free again and the learnt limit hears what
// it showed (overload.go), then the breaker, then the throttle.
func (c *call) leave(ps pass, a attempt) {
	throttled := c.st != nil && c.st.throttle != nil
	var (
		now              time.Time
		counts, accepted bool
	)
	if ps.slot != nil || throttled {
		now, counts, accepted = c.freeSlot(ps, a)
	}
	c.observe(ps.ticket, a)
	if counts && throttled {
		c.feedThrottle(ps, a, now, accepted)
	}
}

// freeSlot frees an attempt's slot and tells the learnt limit what the
// attempt showed: the innermost stage, left first. It returns the step's
// time and the attempt's verdict for the controls of load, for
// feedThrottle.
func (c *call) freeSlot(ps pass, a attempt) (now time.Time, counts, accepted bool) {
	counts, accepted = loadVerdict(a)
	if counts {
		now = c.now() // the attempt's end: finish began the step
	} else {
		now = c.p.clock.Now() // a refusal's or a lost branch's, whenever it is
	}
	if ps.slot != nil {
		ps.slot.ReleaseAt(now, counts && accepted)
	}
	st := c.st
	if !counts || st == nil || st.adaptive == nil || ps.slot == nil || a.keyed == honour.AnswerReplayed {
		return now, counts, accepted // a stored answer's latency says nothing of the load now
	}
	change, ok := st.adaptive.Observe(now, ps.sent, ps.load, !accepted)
	if !ok {
		return now, counts, accepted
	}
	ps.slot.SetLimit(change.To, now)
	if c.t.Hooks.Policy != nil {
		c.reportPolicy(PolicyInfo{Policy: policyAdaptiveLimit, Action: actionChanged,
			Limit: change.To, PrevLimit: change.From, Why: change.Why})
	}
	if change.FromFloor {
		c.startRamp(st, now, change.From, whyLimitRecovered)
	}
	return now, counts, accepted
}

// loadVerdict says what an attempt showed of the dependency's load:
// whether it counts at all, and whether the dependency accepted it. A 429
// or 503 and an attempt without an answer (a timeout, a connection
// refused or lost) are rejected; any other answer is accepted, a replayed
// one (Idempotent-Replayed) too: the dependency took the request and
// answered it. What the caller cancelled or a local error ended does not
// count.
func loadVerdict(a attempt) (counts, accepted bool) {
	switch {
	case a.ignored:
		return false, false
	case a.keyed == honour.AnswerReplayed: // whatever its status: the stored answer of a request the dependency took
		return true, true
	case a.resp != nil:
		code := a.resp.StatusCode
		return true, code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable
	case a.retryable || a.outcome == decide.OutcomeTimeout || a.outcome == decide.OutcomeUnknown:
		return true, false
	}
	return false, false
}

// limits returns the record of the call's scope when attempts pass
// per-scope limits (a rate limiter, a bulkhead, the latencies of hedging),
// nil otherwise. The call found it before its first attempt (see run),
// or finds it now.
func (c *call) limits() *scopeRecord {
	if !c.p.usesLimits() {
		return nil
	}
	st, _ := c.scopeRecord() // without a record (NewBudget failed), no limits apply
	return st
}

// usesLimits reports whether attempts pass per-scope limits at all (with
// SlowStart, a Breaker's closes start a scope's slow start).
func (p *policy) usesLimits() bool {
	return p.rateLimit > 0 || p.maxInFlight > 0 || p.hedge.max > 0 || p.adaptive || p.breaker != nil && p.slowStart > 0
}

// rateLimit takes a token from the scope's limiter, waiting for it when
// that fits within MaxLimitWait and ends before the caller's deadline (a
// wait that ends at the deadline leaves no time for the attempt; a hedge
// never waits); otherwise it takes none and refuses with a
// *RateLimitError.
func (c *call) rateLimit(l *scopeRecord, hedge bool) error {
	if l.rate == nil {
		return nil
	}
	now := c.now()
	r := l.rate.ReserveN(now, 1)
	if !r.OK() {
		return &RateLimitError{Scope: l.name, RetryAfter: rate.InfDuration}
	}
	d := r.DelayFrom(now)
	if d == 0 {
		return nil
	}
	tooLong := d > c.p.maxLimitWait
	if dl, ok := c.deadline(); ok && d >= dl.Sub(now) {
		tooLong = true
	}
	if hedge || tooLong {
		r.CancelAt(now)
		err := &RateLimitError{Scope: l.name, RetryAfter: d}
		if !hedge {
			c.policyEvent(policyRateLimit, actionRejected, 0, err)
		}
		return err
	}
	err := c.wait(d)
	c.step() // time has passed
	if err != nil {
		r.CancelAt(c.now())
		return err
	}
	c.policyEvent(policyRateLimit, actionWaited, d, nil)
	return nil
}

// bulkhead takes a slot of the scope's bulkhead, waiting in its queue
// unless the attempt is a hedge, and returns the attempts then in flight.
// With a learnt limit that has met a queue, the wait is at most a quarter
// of the scope's unloaded latency (unless MaxLimitWait is set): with a
// quarter of the limit waiting at most, as many slots free up in that
// time, so that a slot that does not come by then is not coming soon, and
// a longer wait would only add to the latency; and it leaves the attempt
// that latency before the caller's deadline. While the limit doubles,
// before it first meets a queue, the queue is wide (see
// Bulkhead.queueBoundLocked) and the wait an unloaded latency. Before that
// latency is known (a cold limit), the queue takes eight times the limit,
// for MaxLimitWait's wait, at most half of what is left of the caller's
// deadline: a healthy burst waits for the limit to rise to it rather than
// being refused, and the wait stays short once the dependency's latency
// is known. A fixed limit's queue and slow start's (without a learnt
// limit) know no latency: their wait, as a cold limit's, is at most half
// of what is left of the caller's deadline, so that a caller whose slot
// does not come in time gets a *BulkheadFullError while the other half is
// left for the attempt, rather than its deadline's error.
func (c *call) bulkhead(l *scopeRecord, hedge bool) (int, time.Time, error) {
	now := c.now()
	if load, ok := l.bulkhead.TryAcquireAt(now); ok {
		return load, now, nil
	}
	maxWait, room := c.p.maxLimitWait, bulkhead.Narrow
	switch {
	case hedge:
		maxWait = -1
	case l.adaptive != nil && maxWait > 0:
		unloaded, doubling := l.adaptive.UnloadedLatency()
		switch {
		case unloaded == 0:
			room = bulkhead.Cold
		case doubling:
			room = bulkhead.Wide
		}
		switch {
		case c.p.learntWait != 0 || unloaded == 0:
		case doubling:
			maxWait = unloaded
		default:
			maxWait = unloaded / 4
		}
		if dl, ok := c.deadline(); ok {
			left := dl.Sub(now)
			if unloaded == 0 {
				left /= 2 // the attempt's own latency not known yet: half is left for it
			}
			maxWait = min(maxWait, left-unloaded)
		}
	case maxWait > 0: // a fixed limit, or slow start's: the attempt's latency is not known
		if dl, ok := c.deadline(); ok {
			maxWait = min(maxWait, dl.Sub(now)/2)
		}
	}
	allowed, limit := l.bulkhead.Limits(now) // what the attempt met, should it be refused
	waited, load, ok := l.bulkhead.Acquire(c.ctx, c.p.clock, maxWait, room)
	if waited > 0 {
		c.step() // time has passed
	}
	if ok {
		if waited > 0 {
			c.policyEvent(policyBulkhead, actionQueued, waited, nil)
		}
		return load, now.Add(waited), nil
	}
	if err := c.ctx.Err(); err != nil {
		return 0, time.Time{}, err
	}
	err := &BulkheadFullError{Scope: l.name, MaxInFlight: allowed, QueueWait: waited,
		Learnt: l.adaptive != nil, SlowStart: allowed < limit}
	if !hedge {
		c.policyEvent(policyBulkhead, actionRejected, waited, err)
	}
	return 0, time.Time{}, err
}

// bulkheadFull is the refusal of the scope's bulkhead at now, after a
// wait of waited in its queue.
func (l *scopeRecord) bulkheadFull(now time.Time, waited time.Duration) *BulkheadFullError {
	allowed, limit := l.bulkhead.Limits(now)
	return &BulkheadFullError{Scope: l.name, MaxInFlight: allowed, QueueWait: waited,
		Learnt: l.adaptive != nil, SlowStart: allowed < limit}
}

// policyEvent reports an action of the hedge, the bulkhead, the rate
// limiter or the fallback.
func (c *call) policyEvent(policy, action string, wait time.Duration, err error) {
	if c.t.Hooks.Policy != nil {
		c.reportPolicy(PolicyInfo{Policy: policy, Action: action, Wait: wait, Err: err})
	}
}

// reportPolicy reports i, with the call's CallInfo and scope.
func (c *call) reportPolicy(i PolicyInfo) {
	if h := c.t.Hooks.Policy; h != nil {
		i.CallInfo, i.Scope = c.info(), c.scopeName()
		emit(h, i)
	}
}

// admit asks the breaker, if any, to let the next attempt through.
func (c *call) admit() (breaker.Ticket, error) {
	b := c.p.breaker
	if b == nil {
		return breaker.Ticket{}, nil
	}
	ticket, change, err := b.Allow(c.breakerScopeName(), c.now())
	c.breakerChanged(change)
	return ticket, err
}

// openThrough reports the breaker's refusal, if any, of an attempt that
// would start at t: the scope is open and stays open until then. It
// changes nothing: the breaker admits the attempt (admit) once the wait is
// over, for the scope may open during the wait.
func (c *call) openThrough(t time.Time) error {
	if c.p.breaker == nil {
		return nil
	}
	return c.p.breaker.OpenUntil(c.breakerScopeName(), t)
}

// observe feeds an attempt's result to the breaker: only what the
// dependency did counts. The caller's cancellation, an error of the
// caller's body, and local errors that are not transient say nothing about
// the dependency's health.
func (c *call) observe(ticket breaker.Ticket, a attempt) {
	if c.p.breaker == nil {
		return
	}
	var (
		o     = breaker.Ignore
		cause error
		now   = c.now()
	)
	switch {
	case a.ignored:
	case a.keyed == honour.AnswerInFlight:
		o = breaker.Success // the server answered, as it should, that the key's first request runs
	case a.resp != nil && a.retryable:
		o, cause = breaker.Failure, statusError(a.resp, now)
	case a.resp != nil:
		o = breaker.Success
	case a.retryable || a.outcome == decide.OutcomeTimeout || a.outcome == decide.OutcomeUnknown:
		o, cause = breaker.Failure, a.err
	}
	c.breakerChanged(ticket.Done(o, cause, now))
}

func (c *call) breakerChanged(change breaker.Change) {
	if change.To != 0 {
		if change.To == breaker.Closed {
			c.rampAfterClose(change)
		}
		c.hookPanicked("Hooks.BreakerChange", emit(c.t.Hooks.BreakerChange, change))
	}
}
