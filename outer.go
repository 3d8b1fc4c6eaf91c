package retryfuse

import (
	"context"
	"errors"
)

// This file is what a layer above the Transport needs to leave the
// repeating to it: a predicate for outer retry loops, and a key that
// survives them.

// MayRetry reports whether a retry layer above the Transport (an SDK's
// retryer, resty's retry conditions, a loop of the caller's own) may send
// the request again after RoundTrip returned err.
//
// It is false for nil, and for every error by which the Transport has
// already decided the request: a write whose outcome is uncertain
// (ErrReconcileRequired), a request that may not be repeated
// (ErrNotRepeatable), a refusal of the retry budget, the breaker, the
// bulkhead, the rate limiter or the ledger (every error matching
// ErrDeclined, and ErrIdempotencyConflict and ErrAlreadyApplied), a call
// that used its
// attempts or its cost (ErrAttemptsExhausted, ErrFailureStreak,
// ErrCallCost, ErrDeadline), an invalid request or setting
// (ErrInvalidPolicy, ErrInvalidIdempotencyKey, ErrFingerprintLimit), and
// the caller's own cancellation or deadline. Sending again after any of
// these would multiply attempts the Transport has bounded, or replay a
// write it refused to replay.
//
// It is false too for a transient network error as it is (a reset, an
// EOF, a timeout): the Transport never returns one bare — it retries it or
// wraps it in one of the errors above — so such an error comes from
// reading a response's body, after the request was answered and perhaps
// applied (resty, for one, hands its retry conditions the error of a body
// cut short). For any other error — one the Transport judged final and
// returned as it was, such as a certificate failure — it is true: the
// layer above may apply its own judgement.
//
// A response the Transport returns, even a final 503, was already retried
// as far as the budget and the policy allow; a layer above should not
// retry it either.
func MayRetry(err error) bool {
	if err == nil {
		return false
	}
	for _, target := range finalErrors {
		if errors.Is(err, target) {
			return false
		}
	}
	return !transientError(err)
}

// finalErrors are the errors after which MayRetry says no.
var finalErrors = [...]error{
	ErrReconcileRequired, ErrNotRepeatable, ErrDeclined,
	ErrIdempotencyConflict, ErrAlreadyApplied, ErrAttemptsExhausted, ErrFailureStreak, ErrCallCost, ErrDeadline,
	ErrInvalidPolicy, ErrInvalidIdempotencyKey, ErrFingerprintLimit,
	context.Canceled, context.DeadlineExceeded,
}

// WithIdempotencyKey returns a copy of ctx that carries key as the
// idempotency key of the logical operation a request belongs to. A request
// sent with it that carries no Idempotency-Key header of its own is sent
// with this key, as if it carried it: it may be repeated, and a Ledger knows
// it. An outer retry layer that sends the request again with the same
// context sends the same key, so that the server applies the operation
// once. An invalid key makes RoundTrip return an error wrapping
// ErrInvalidIdempotencyKey, as a header would.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, contextKey{}, key)
}
