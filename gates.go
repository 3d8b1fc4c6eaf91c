package retryfuse

import "context"

// This file holds the gates an attempt passes besides the decision core:
// the shared retry budget, and (when configured) the breaker and the key
// ledger. Each gate's refusal is reported as itself, never relabelled as
// evidence of another.

// recordRequest resolves the call's scope and budget and tells the budget
// of the call's first attempt.
func (c *call) recordRequest() error {
	c.scope = c.t.scope(c.req)
	b, err := c.t.budget(c.scope)
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
