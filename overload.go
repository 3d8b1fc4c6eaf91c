package retryfuse

import (
	"net/http"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/throttle"
)

// This file is how a call meets the controls of load (DESIGN.md, "Load"):
// the throttle admits a new call before its first attempt
// (internal/throttle); each attempt's outcome feeds the throttle as it
// leaves (the learnt limit hears it first, in admission.go); and a
// scope's slow start
// begins when its breaker closes or its learnt limit rises from its floor
// (internal/bulkhead, in the scope's bulkhead).
// Neither a refusal of these nor any of their counts reaches the breaker.

// The names of PolicyInfo.Policy, PolicyInfo.Action and PolicyInfo.Why
// for the controls of load.
const (
	policyThrottle      = "throttle"
	policyAdaptiveLimit = "adaptive_limit"
	policySlowStart     = "slow_start"

	actionChanged = "changed"
	actionStarted = "started"

	whyBreakerClosed  = "breaker_closed"
	whyLimitRecovered = "limit_recovered"
)

// admitCall asks the scope's pace and throttle, when asked for, to admit
// the call: the gates of new work, before the budget counts the call. The
// pace learnt from 429s (internal/throttle's Pace) may make it wait for its
// place (keepPace); the throttle may refuse it. A refusal is reported and
// ends the call before anything is sent. The throttle never refuses a call
// that settles an uncertain write (reconciling). With a Breaker, the
// throttle refuses nothing until the scope's breaker has heard
// MinObservations outcomes since it last closed: the user's brake decides
// first.
func (c *call) admitCall() error {
	st := c.st // found by run, before the gates
	if c.p.pace {
		if err := c.keepPace(st); err != nil {
			return err
		}
	}
	if !c.p.throttle || !st.throttle.Active() || reconciling(c.ctx) {
		return nil // nothing rejected lately: no reading of the clock
	}
	var waive func() bool
	if b := c.p.breaker; b != nil {
		// The breaker has not seen what its settings ask for: it decides.
		waive = func() bool { return !b.Heard(c.breakerScopeName()) }
	}
	share := st.throttle.Admit(c.p.clock.Now(), c.p.randN, waive)
	if share == 0 {
		return nil
	}
	err := &throttle.Error{Scope: st.name, Share: share}
	c.reportPolicy(PolicyInfo{Policy: policyThrottle, Action: actionRejected, Err: err})
	c.giveUp(err, decide.Verdict{})
	return err
}

// keepPace waits for the call's place in the scope's pace, when the
// dependency has been answering 429, within the bound of LoadPolicy.MaxWait:
// at most MaxLimitWait (negative: no wait), and less than half of what is
// left of the caller's deadline. A 429's Retry-After that holds new calls
// is waited for within the same bound. A call whose place comes
// later is refused with a *RateLimitError (Learnt), having sent nothing:
// sent, it would have met a 429. A scope whose breaker is not closed is
// not paced: the breaker decides first (an open one fails fast, a
// half-open one lets its probes through), and nothing waits for a place
// the breaker would refuse.
func (c *call) keepPace(st *scopeRecord) error {
	pace := st.throttle.Pace()
	if !pace.Active() {
		return nil // idle: no reading of the clock
	}
	now := c.now()
	if b := c.p.breaker; b != nil && b.StateAt(c.breakerScopeName(), now) != breaker.Closed {
		return nil
	}
	d, _, cancel := pace.Delay(now)
	if d == 0 {
		return nil
	}
	tooLong := d > c.p.maxLimitWait
	if dl, ok := c.deadline(); ok && d >= dl.Sub(now)/2 {
		// A call sent with little of its deadline left is one the
		// dependency serves too late: it spends a place of the quota for
		// nothing. Half of what is left stays for the call.
		tooLong = true
	}
	if tooLong {
		cancel()
		err := &RateLimitError{Scope: st.name, RetryAfter: d, Learnt: true}
		c.reportPolicy(PolicyInfo{Policy: policyThrottle, Action: actionRejected, Wait: d, Err: err})
		c.giveUp(err, decide.Verdict{})
		return err
	}
	err := c.wait(d)
	c.step() // time has passed
	if err != nil {
		cancel()
		c.giveUp(err, decide.Verdict{})
		return err
	}
	if c.t.Hooks.Policy != nil {
		c.reportPolicy(PolicyInfo{Policy: policyThrottle, Action: actionWaited, Wait: d})
	}
	return nil
}

// feedThrottle tells the throttle and its pace what an attempt that counts
// showed, at now: the outer control of load, left after the breaker.
func (c *call) feedThrottle(ps pass, a attempt, now time.Time, accepted bool) {
	th := c.st.throttle
	if a.resp != nil && a.resp.StatusCode == http.StatusTooManyRequests {
		// A rate, not a failure: the pace learns it, and its Retry-After
		// holds new calls unless a retry would not wait for it.
		ra, hold := c.paceHold(a.resp, now)
		th.Pace().Throttled(now, ra, hold, func() float64 { return th.AcceptedRate(now) })
		return
	}
	th.Record(now, ps.first, accepted)
	th.Pace().Answered(now)
}

// rampAfterClose starts the slow start of the call's scope, when
// SlowStart asks for one, after its breaker closed, from the breaker's probes (or the learnt limit's floor,
// when higher).
func (c *call) rampAfterClose(change breaker.Change) {
	if c.p.slowStart <= 0 {
		return
	}
	st := c.limits()
	if st == nil || st.bulkhead == nil {
		return
	}
	c.startRamp(st, change.At, max(change.Settings.MaxProbes, c.p.minInFlight), whyBreakerClosed)
}

// startRamp starts the slow start of st at now from attempts from, and
// reports it.
func (c *call) startRamp(st *scopeRecord, now time.Time, from int, why string) {
	if c.p.slowStart <= 0 || !st.bulkhead.StartRamp(now, from, c.p.slowStart) {
		return
	}
	if c.t.Hooks.Policy != nil {
		c.reportPolicy(PolicyInfo{Policy: policySlowStart, Action: actionStarted,
			Wait: c.p.slowStart, Limit: max(1, from), Why: why})
	}
}
