package retryfuse

import "context"

// This file is the retry budget as a call meets it: the call's budget is
// found (the Transport's shared one, or its scope's) and told of the
// call's first attempt; every retry, and every re-send of the base, takes
// a token; a refusal is reported as itself (ErrBudgetExhausted), never
// relabelled as evidence about the dependency; a budget that cannot
// establish its answer applies its declared fail-safe, which is reported
// (Hooks.EvidenceUnavailable). The budgets themselves are package
// budget's; schedule (retry.go) asks this gate before a retry's wait.

// recordRequest finds the call's budget — the Transport's shared one, or
// its scope's — and tells it of the call's first attempt. A budget of this
// package is told when the first attempt is over, on the reading of the
// clock that its end takes anyway (depositRequest), unless the call may
// hedge, which draws on the budget while the first attempt runs.
func (c *call) recordRequest() {
	b := c.p.budget
	if b == nil {
		b = c.st.budget // found by run, before the gates
	}
	c.budget = b
	if cb, ok := b.(clockedBudget); ok {
		if c.p.hedge.max == 0 {
			c.deposit = cb.b
			return
		}
		cb.b.RecordRequestAt(c.now()) // the call's start: the step's reading
	} else {
		b.RecordRequest(c.budgetContext())
		c.step() // a budget of another package may be remote: time has passed
	}
}

// depositRequest tells the call's budget of its first attempt when
// recordRequest left that for later: once the first attempt is over, before
// any retry asks the budget, or once the call ends without one (a
// refusal, the caller's deadline).
func (c *call) depositRequest() {
	if c.deposit != nil {
		c.deposit.RecordRequestAt(c.now())
		c.deposit = nil
	}
}

// allowRetry asks the budget for one retry. When the budget cannot
// establish its answer, its declared fail-safe applies and is reported.
func (c *call) allowRetry() bool {
	if cb, ok := c.budget.(clockedBudget); ok {
		return cb.b.AllowRetryAt(c.now()) // the step's reading
	}
	ok, err := c.budget.AllowRetry(c.budgetContext())
	if err != nil {
		c.hookPanicked("Hooks.EvidenceUnavailable", emit(c.t.Hooks.EvidenceUnavailable, EvidenceUnavailableInfo{CallInfo: c.info(), Source: "budget", Err: err}))
	}
	return ok
}

// chargeResends counts the requests that the base re-sent by itself within
// attempt a (net/http does so for a GET whose reused connection had died)
// against MaxAttempts: they load the dependency as retries do. Each took a
// retry from the budget as it happened, or was stopped (resend.go); the
// budget's errors then are reported now, on the call's goroutine.
func (c *call) chargeResends(a attempt) {
	if c.passThrough {
		return
	}
	c.resent += a.resends
	if a.evidence != nil {
		c.budgetUnavailable(a.evidence)
	}
}

// budgetUnavailable reports the errors of the budget asked for re-sends:
// its declared fail-safe answered instead.
func (c *call) budgetUnavailable(errs *budgetError) {
	for _, err := range errs.all() {
		c.hookPanicked("Hooks.EvidenceUnavailable", emit(c.t.Hooks.EvidenceUnavailable, EvidenceUnavailableInfo{CallInfo: c.info(), Source: "budget", Err: err}))
	}
}

// budgetContext is the caller's context without the retry-ownership mark.
func (c *call) budgetContext() context.Context { return c.req.Context() }
