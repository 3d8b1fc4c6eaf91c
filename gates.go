package retryfuse

import (
	"context"
	"net/http"
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

// budgetContext is the caller's context without the retry-ownership mark.
func (c *call) budgetContext() context.Context { return c.req.Context() }

// admit asks the breaker, if any, to let the next attempt through.
func (c *call) admit() (breakerTicket, error) {
	b := c.t.Breaker
	if b == nil {
		return breakerTicket{}, nil
	}
	ticket, tr, err := b.allow(c.scopeName())
	c.breakerChanged(tr)
	return ticket, err
}

// openThrough reports the breaker's refusal, if any, of an attempt that
// would start at t: the scope is open and stays open until then.
func (c *call) openThrough(t time.Time) error {
	if c.t.Breaker == nil {
		return nil
	}
	return c.t.Breaker.openUntil(c.scopeName(), t)
}

// observe feeds an attempt's result to the breaker: only what the
// dependency did counts. The caller's cancellation, an error of the
// caller's body, and local errors that are not transient say nothing about
// the dependency's health.
func (c *call) observe(ticket breakerTicket, resp *http.Response, err error, r result) {
	if c.t.Breaker == nil {
		return
	}
	var (
		o     = observeIgnore
		cause error
	)
	switch {
	case r.ignored:
	case resp != nil && r.retryable:
		o, cause = observeFailure, statusError(resp, c.t.clock())
	case resp != nil:
		o = observeSuccess
	case r.retryable || r.outcome == decide.OutcomeTimeout || r.outcome == decide.OutcomeUnknown:
		o, cause = observeFailure, err
	}
	c.breakerChanged(ticket.done(o, cause))
}

func (c *call) breakerChanged(tr BreakerChangeInfo) {
	if tr.To != 0 {
		emit(c.t.Hooks.BreakerChange, tr)
	}
}
