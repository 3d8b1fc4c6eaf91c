package retryfuse

import (
	"context"
	"time"

	"github.com/retryfuse/retryfuse/decide"
)

// This file holds the gates an attempt passes besides the decision core:
// the shared retry budget, and (when configured) the breaker and the key
// ledger. Each gate's refusal is reported as itself, never relabelled as
// evidence of another.

// recordRequest resolves the call's scope and budget and tells the budget
// of the call's first attempt.
func (c *call) recordRequest() error {
	b, err := c.t.budget(c.req, c.scopeName)
	if err != nil {
		return err
	}
	c.budget = b
	b.RecordRequest(c.budgetContext())
	return nil
}

// allowRetry asks the budget for one retry. When the budget cannot
// establish its answer, its declared fail-safe applies and is reported.
func (c *call) allowRetry() bool {
	ok, err := c.budget.AllowRetry(c.budgetContext())
	if err != nil {
		emit(c.t.Hooks.EvidenceUnavailable, EvidenceUnavailableInfo{CallInfo: c.info(), Source: "budget", Err: err})
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
		emit(c.t.Hooks.EvidenceUnavailable, EvidenceUnavailableInfo{CallInfo: c.info(), Source: "budget", Err: err})
	}
}

// budgetContext is the caller's context without the retry-ownership mark.
func (c *call) budgetContext() context.Context { return c.req.Context() }

// admit asks the breaker, if any, to let the next attempt through.
func (c *call) admit() (breakerTicket, error) {
	b := c.p.breaker
	if b == nil {
		return breakerTicket{}, nil
	}
	ticket, change, err := b.allow(c.scopeName(), c.p.clock.Now())
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
	return c.p.breaker.openUntil(c.scopeName(), t)
}

// observe feeds an attempt's result to the breaker: only what the
// dependency did counts. The caller's cancellation, an error of the
// caller's body, and local errors that are not transient say nothing about
// the dependency's health.
func (c *call) observe(ticket breakerTicket, a attempt) {
	if c.p.breaker == nil {
		return
	}
	var (
		o     = observeIgnore
		cause error
		now   = c.p.clock.Now()
	)
	switch {
	case a.ignored:
	case a.resp != nil && a.retryable:
		o, cause = observeFailure, statusError(a.resp, now)
	case a.resp != nil:
		o = observeSuccess
	case a.retryable || a.outcome == decide.OutcomeTimeout || a.outcome == decide.OutcomeUnknown:
		o, cause = observeFailure, a.err
	}
	c.breakerChanged(ticket.done(o, cause, now))
}

func (c *call) breakerChanged(change BreakerChangeInfo) {
	if change.To != 0 {
		emit(c.t.Hooks.BreakerChange, change)
	}
}
