package retryfuseotel

import (
	"context"
	"errors"

	"github.com/retryfuse/retryfuse"
)

// bg is the context metrics are recorded with: hooks receive none.
var bg = context.Background()

// reasons name the sentinels a call gives up with.
var reasons = [...]struct {
	err  error
	name string
}{
	{retryfuse.ErrAttemptsExhausted, "attempts_exhausted"},
	{retryfuse.ErrBudgetExhausted, "budget_exhausted"},
	{retryfuse.ErrNotRepeatable, "not_repeatable"},
	{retryfuse.ErrFailureThreshold, "failure_threshold"},
	{retryfuse.ErrCostBudget, "cost_budget"},
	{retryfuse.ErrRetryAfterTooLong, "retry_after_too_long"},
	{retryfuse.ErrDeadline, "deadline"},
	{retryfuse.ErrCircuitOpen, "circuit_open"},
	{retryfuse.ErrDuplicateInFlight, "duplicate_in_flight"},
	{retryfuse.ErrIdempotencyConflict, "idempotency_conflict"},
	{retryfuse.ErrFinal, "final"},
	{context.Canceled, "canceled"},
	{context.DeadlineExceeded, "deadline_exceeded"},
}

// reason names err for the retryfuse.reason attribute; an error that is
// none of the known reasons is _OTHER, which bounds the cardinality.
func reason(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "_OTHER"
}
