package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestReasonName(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{ErrAttemptsExhausted, "attempts_exhausted"},
		{ErrBudgetExhausted, "budget_exhausted"},
		{ErrNotRepeatable, "not_repeatable"},
		{ErrFailureStreak, "failure_streak"},
		{ErrCallCost, "call_cost"},
		{errRetryAfterTooLong, "retry_after_too_long"},
		{ErrDeadline, "deadline"},
		{ErrCircuitOpen, "circuit_open"},
		{ErrDuplicateInFlight, "duplicate_in_flight"},
		{ErrIdempotencyConflict, "idempotency_conflict"},
		{errFinal, "final"},
		{context.Canceled, "canceled"},
		{context.DeadlineExceeded, "deadline_exceeded"},
		{fmt.Errorf("scope api:443: %w", ErrCircuitOpen), "circuit_open"},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), "deadline_exceeded"},
		{&BulkheadFullError{MaxInFlight: 4}, "bulkhead_full"},
		{&BulkheadFullError{MaxInFlight: 4, Learnt: true}, "learnt_limit"},
		{&BulkheadFullError{MaxInFlight: 1, SlowStart: true}, "slow_start"},
		{&BulkheadFullError{MaxInFlight: 1, Learnt: true, SlowStart: true}, "slow_start"},
		{&RateLimitError{Learnt: true}, "rate_limited"},
		{&ReconcileRequiredError{Cause: context.DeadlineExceeded}, "reconcile_required"},
		{&ReconcileRequiredError{Earlier: true}, "reconcile_required"},
		{&attemptTimeoutError{after: time.Second, err: context.Canceled}, "attempt_timeout"},
		{ErrAttemptTimeout, "attempt_timeout"},
		{errors.New("retryfuse: attempts exhausted"), "other"}, // same text, not the sentinel
		{nil, ""},
	} {
		if got := ReasonName(tt.err); got != tt.want {
			t.Errorf("ReasonName(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// Every name is snake_case and names one reason only.
func TestReasonNamesDistinct(t *testing.T) {
	seen := map[string]error{}
	for _, r := range reasonNames {
		if prev, ok := seen[r.name]; ok {
			t.Errorf("name %q: for %v and %v", r.name, prev, r.err)
		}
		seen[r.name] = r.err
		for _, c := range r.name {
			if (c < 'a' || c > 'z') && c != '_' {
				t.Errorf("name %q: got %q, want only a-z and _", r.name, c)
			}
		}
		if got := ReasonName(r.err); got != r.name {
			t.Errorf("ReasonName(%v) = %q, want %q (matched by an earlier entry)", r.err, got, r.name)
		}
	}
}
