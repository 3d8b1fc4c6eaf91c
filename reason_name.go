package retryfuse

import (
	"context"
	"errors"

	"github.com/retryfuse/retryfuse/internal/throttle"
)

// This file names the reasons a call gives up with (GiveUpInfo.Reason),
// for logs and metrics: one stable name per sentinel, matched in order.

// reasonNames name the reasons a call gives up with, in the order they
// are matched.
var reasonNames = [...]struct {
	err  error
	name string
}{
	{ErrAttemptsExhausted, "attempts_exhausted"},
	{ErrBudgetExhausted, "budget_exhausted"},
	{ErrNotRepeatable, "not_repeatable"},
	{ErrFailureStreak, "failure_streak"},
	{ErrCallCost, "call_cost"},
	{errRetryAfterTooLong, "retry_after_too_long"},
	{ErrDeadline, "deadline"},
	{ErrCircuitOpen, "circuit_open"},
	{errBulkheadFull, "bulkhead_full"},
	{errRateLimited, "rate_limited"},
	{throttle.ErrThrottled, "throttled"},
	{ErrLedgerUnavailable, "ledger_unavailable"},
	{ErrDuplicateInFlight, "duplicate_in_flight"},
	{ErrIdempotencyConflict, "idempotency_conflict"},
	{ErrAlreadyApplied, "already_applied"},
	{errFinal, "final"},
	{context.Canceled, "canceled"},
	{context.DeadlineExceeded, "deadline_exceeded"},
}

// ReasonName returns a stable snake_case name for a GiveUpInfo.Reason,
// for logs and metrics: attempts_exhausted, budget_exhausted,
// not_repeatable, failure_streak, call_cost, retry_after_too_long,
// deadline, circuit_open, bulkhead_full, rate_limited, throttled,
// ledger_unavailable, duplicate_in_flight, idempotency_conflict,
// already_applied, final, canceled or deadline_exceeded, matched with errors.Is; "other"
// for any other error, which keeps the set of names bounded; "" for nil.
// The names are a compatibility promise; names may be added.
func ReasonName(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range reasonNames {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "other"
}
