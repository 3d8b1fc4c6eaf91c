package retryfuse

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/redact"
	"github.com/retryfuse/retryfuse/internal/sentinel"
	"github.com/retryfuse/retryfuse/internal/throttle"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is the errors a caller handles: the sentinels, the call's
// error types, and the stable name of each reason a call gives up with
// (ReasonName), for logs and metrics.

// Sentinel errors. Test for them with errors.Is; each survives the *url.Error
// wrapping that http.Client adds.
var (
	// ErrDeclined is matched by every error where the Transport held back
	// for a while: it refused to send, or to send again, or stopped
	// waiting, on a limit that passes — ErrBudgetExhausted, ErrCircuitOpen
	// (and *breaker.OpenError), *BulkheadFullError, *RateLimitError,
	// the throttle's refusal (ReasonName: throttled), ErrDeadline, and the ledger's ErrDuplicateInFlight and
	// ErrLedgerUnavailable. The rule: an error matches ErrDeclined only if
	// the same request, sent later (or elsewhere), may go through. It is not
	// matched by the dependency's own failures (an error, or a retryable
	// status, on every attempt: ErrAttemptsExhausted, ErrNotRepeatable,
	// ErrFailureStreak, ErrCallCost), by a *ReconcileRequiredError, by
	// refusals that a later try meets again (ErrIdempotencyConflict,
	// ErrAlreadyApplied), by the caller's own cancellation, nor by invalid
	// settings or input. One check tells "we held back" from "it broke":
	//
	//	if errors.Is(err, retryfuse.ErrDeclined) { // not sent: try later, or elsewhere
	//	}
	//
	// A *RetryError whose Reason is declined matches it even though its
	// Last attempt failed: the Transport declined to try again.
	ErrDeclined = sentinel.ErrDeclined

	// ErrInvalidPolicy is wrapped by every error about an invalid setting.
	ErrInvalidPolicy = sentinel.ErrInvalidPolicy

	// ErrAttemptsExhausted: the call used all of MaxAttempts. RoundTrip
	// returns it (wrapped with the last error) only when the last attempt
	// failed with an error; a last retryable response is returned as a
	// response, and hooks report the reason.
	ErrAttemptsExhausted = errors.New("retryfuse: attempts exhausted")

	// ErrBudgetExhausted: a shared retry budget refused a retry.
	ErrBudgetExhausted = declined("retryfuse: retry budget exhausted")

	// ErrCircuitOpen: the brake of the request's scope is open; the request
	// was not sent, or (after earlier attempts, in a *RetryError) not sent again.
	ErrCircuitOpen = breaker.ErrOpen

	// ErrDuplicateInFlight: another call holds the same idempotency key now;
	// nothing was sent.
	ErrDuplicateInFlight = declined("retryfuse: duplicate request in flight")

	// ErrIdempotencyConflict: the idempotency key was used before with a
	// different body; nothing was sent. It is not declined: sending the same
	// request later fails the same way, for as long as the ledger keeps the
	// key. Use a new key for a new operation.
	ErrIdempotencyConflict = errors.New("retryfuse: idempotency key reused with a different body")

	// ErrReconcileRequired: a write may have been applied; it was not replayed.
	// The error is a *ReconcileRequiredError.
	ErrReconcileRequired = errors.New("retryfuse: outcome uncertain, reconcile required")

	// ErrNotRepeatable: the request failed and may not be sent again (a method
	// that is not idempotent without an Idempotency-Key, or a body that cannot
	// be replayed). Decision rule 5.
	ErrNotRepeatable = sentinel.ErrNotRepeatable

	// ErrFailureStreak: the trailing streak of failed attempts reached
	// RetryPolicy.MaxFailureStreak. Decision rule 6.
	ErrFailureStreak = errors.New("retryfuse: failure threshold reached")

	// ErrCallCost: the total cost of the attempts reached the policy's
	// MaxCallCost. Decision rule 7.
	ErrCallCost = errors.New("retryfuse: attempt cost budget reached")

	// errRetryAfterTooLong: the server asked for a wait longer than
	// MaxRetryAfter or than the caller's deadline leaves. Only reported through
	// hooks: the server's response itself is returned.
	errRetryAfterTooLong = errors.New("retryfuse: Retry-After exceeds the cap or the deadline")

	// ErrDeadline: the next wait or attempt could not finish before the
	// caller's deadline, so it was not started.
	ErrDeadline = declined("retryfuse: no time left before the deadline")

	// errFinal: the attempt failed with an error that is not retryable
	// (the caller's cancellation, a certificate failure, a malformed
	// request), handed back as it is. Only reported through hooks.
	errFinal = errors.New("retryfuse: result is final")

	// ErrAttemptTimeout: one attempt ran past RetryPolicy.AttemptTimeout
	// before its response headers arrived. The error matching it also
	// reports Timeout() == true.
	ErrAttemptTimeout = errors.New("retryfuse: attempt timed out")

	// ErrLedgerUnavailable: the key ledger could not say whether the key
	// is free, so the request was not sent: a key is never treated as free
	// without evidence. It is ledger.ErrUnavailable, which a Ledger of a
	// shared store wraps in its failures; either matches.
	ErrLedgerUnavailable = ledger.ErrUnavailable

	// ErrAlreadyApplied: an earlier call under the idempotency key was
	// applied, but no result of it is kept to replay (it was too large for
	// the ledger, or it was learnt by reconciling:
	// ReconcileRequiredError.Resolve with applied true). The request was not
	// sent again, and sending it later will not change that while the key
	// is held: look the result up by the key. It is not an uncertain
	// outcome: errors.Is(err, ErrReconcileRequired) is false.
	ErrAlreadyApplied = errors.New("retryfuse: already applied under this idempotency key; its result was not stored to replay")

	// ErrInvalidIdempotencyKey: the Idempotency-Key header cannot be sent
	// safely (empty, control characters, longer than 255 bytes). A
	// ledger's refusal of an empty key matches it too.
	ErrInvalidIdempotencyKey = sentinel.ErrInvalidIdempotencyKey

	// ErrFingerprintLimit: with a Ledger, a request's body is longer than
	// Keys.MaxFingerprintBytes, so it cannot be recognised again; nothing was
	// sent.
	ErrFingerprintLimit = sentinel.ErrFingerprintLimit
)

func declined(msg string) error { return sentinel.Declined(msg) }

// RetryError is returned when a call stops without a response to give back.
// Reason is one of the sentinel errors above (ErrAttemptsExhausted,
// ErrBudgetExhausted, ErrNotRepeatable, ...); Last is the error of the last
// attempt. Both match errors.Is:
//
//	switch {
//	case errors.Is(err, retryfuse.ErrBudgetExhausted): // the dependency is failing for many callers
//	case errors.Is(err, retryfuse.ErrAttemptsExhausted): // this call ran out of attempts
//	case errors.Is(err, syscall.ECONNREFUSED): // and why the last attempt failed
//	}
type RetryError struct {
	Reason   error
	Last     error
	Attempts int

	about string // the request and its key, for a ledger's refusal
}

func (e *RetryError) Error() string {
	s := e.Reason.Error()
	if e.about != "" {
		s += ": " + e.about
	}
	if e.Attempts > 0 {
		s += " after " + counted(e.Attempts, "attempt")
	}
	if e.Last != nil {
		s += ": " + e.Last.Error()
	}
	return s
}

// Timeout reports whether the call ended on a timeout: an attempt's, or the
// caller's deadline. It lets the checks written for net/http's errors work
// through http.Client's *url.Error: urlErr.Timeout() and os.IsTimeout(err).
func (e *RetryError) Timeout() bool { return isTimeout(e.Reason) || isTimeout(e.Last) }

// Unwrap returns Reason and Last, so that errors.Is matches either.
func (e *RetryError) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Last}
}

// ReconcileRequiredError reports a request that may have taken effect on the
// server although no response confirmed it: a timeout, reset or
// cancellation after the request was (or may have been) written. It is never
// replayed automatically. Look the effect up by IdempotencyKey (or by your
// own business key) and decide.
//
// errors.Is(err, ErrReconcileRequired) holds, and so does errors.Is with the
// Cause (for example context.DeadlineExceeded when the caller's deadline
// struck after the write).
type ReconcileRequiredError struct {
	Method string
	// URL is the request URL without user information and with redacted
	// query parameters (see Transport.RedactQueryParams).
	URL string
	// IdempotencyKey is the key the request carried, or the key the
	// transport generated for it (KeyGenerated). Empty when there was none.
	IdempotencyKey string
	KeyGenerated   bool
	// Attempts is the number of attempts made, the uncertain one included.
	Attempts int
	// Phase is how far the uncertain attempt got.
	Phase decide.Phase
	// At is when the uncertain attempt ended.
	At time.Time
	// Cause is the error of the uncertain attempt; nil when Earlier.
	Cause error
	// Earlier is true when this call applied nothing: it was not sent,
	// because an earlier call under the same key left its write uncertain,
	// or the server that honours keys answered it so (409 outcome unknown:
	// a handler that panicked, a server that died mid-request). Attempts,
	// Phase and At then describe that earlier call, as far as this process
	// knows it: they are zero (and Phase unknown) when it does not (the
	// call was another process's, under a shared Ledger, or the server's).
	Earlier bool

	scope    string                                        // with Earlier, the key's scope
	answered bool                                          // with Earlier, the server refused it (409 outcome unknown)
	honours  func() bool                                   // whether the key's server is still known to honour it (nil: it was not): see Repeat
	resolve  func(ctx context.Context, applied bool) error // see Resolve
}

func (e *ReconcileRequiredError) Error() string {
	if e.Earlier {
		refused := "not sent"
		if e.answered {
			refused = "refused by the server, which honours keys"
		}
		s := "retryfuse: " + e.Method + " " + e.URL + ": " + refused + ": an earlier call under idempotency key " +
			strconv.Quote(e.IdempotencyKey) + " in scope " + e.scope + " left its outcome uncertain"
		if e.At.IsZero() {
			s += " (when, and how far it got, is not known here)"
		} else {
			s += " at " + e.At.Format(time.RFC3339) + " after " + counted(e.Attempts, "attempt") + " (phase " + e.Phase.String() + ")"
		}
		return s + "; reconcile required"
	}
	s := "retryfuse: " + e.Method + " " + e.URL + ": outcome uncertain after " + counted(e.Attempts, "attempt") +
		" (phase " + e.Phase.String() + "), reconcile required"
	if e.IdempotencyKey != "" {
		s += " (idempotency key " + strconv.Quote(e.IdempotencyKey) + ")"
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Resolve records what the caller has learnt about the write, once it has
// looked it up: whether it was applied. Until then the Transport holds the
// key — in its Ledger, or in its own memory without one (bounded, for 24
// hours) — and tells every later call under it to reconcile, rather than
// send it. Applied: the key stays done, and a later call under it is still
// not sent (it gets an error matching ErrAlreadyApplied: there is no stored
// result to replay). Not applied: the key is free, and a later call under
// it is sent, as a new one.
//
// Resolve works after the caller's deadline, which has often struck
// already (it is what left the write uncertain): ctx gives its values to
// the ledger step, but not its cancellation; the step has a bounded time of
// its own (5 s). A Ledger's error (ledger.ErrToken when its claim has
// expired or was ended already, or the store's failure) is returned.
// Without a Ledger, as with one, it ends only the hold it is about: once
// the key was freed and a later call's write under it was left uncertain
// in turn, an older error's Resolve(ctx, false) (or Repeat) frees nothing.
// A write without an
// idempotency key of its own (none, or a generated one) holds nothing, and
// Resolve does nothing.
func (e *ReconcileRequiredError) Resolve(ctx context.Context, applied bool) error {
	if e.resolve == nil {
		return nil
	}
	return e.resolve(ctx, applied)
}

// Timeout reports whether the uncertain attempt timed out (its own
// timeout or the caller's deadline), as Timeout does for net/http's errors.
func (e *ReconcileRequiredError) Timeout() bool { return isTimeout(e.Cause) }

// Unwrap returns ErrReconcileRequired and the cause, so that errors.Is
// and errors.As match either.
func (e *ReconcileRequiredError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrReconcileRequired}
	}
	return []error{ErrReconcileRequired, e.Cause}
}

// StatusError describes a response whose status was classified as
// retryable. Hooks receive it as an attempt's error; it is never returned by
// RoundTrip, which gives such a response back as a response.
type StatusError struct {
	StatusCode int
	Status     string
	// RetryAfter is the server's Retry-After, zero when absent or invalid.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	s := "retryfuse: retryable status " + e.Status
	if e.Status == "" {
		s = "retryfuse: retryable status " + strconv.Itoa(e.StatusCode)
	}
	return s
}

// counted returns n and the noun, plural unless n is 1: "1 attempt",
// "2 attempts".
func counted(n int, noun string) string {
	s := strconv.Itoa(n) + " " + noun
	if n != 1 {
		s += "s"
	}
	return s
}

func invalidPolicy(field, problem string) error { return sentinel.InvalidPolicy(field, problem) }

// isTimeout reports whether err is, or wraps, a timeout: an error whose
// Timeout method says so, or context.DeadlineExceeded.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout())
}

// redactedURL is the call's URL as its hooks and errors show it
// (redact.URL), rendered on first use.
func (c *call) redactedURL() string {
	if c.url == "" {
		c.url = redact.URL(c.req.URL, c.p.redact)
	}
	return c.url
}

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
	{errSlowStart, "slow_start"},
	{errLearntLimit, "learnt_limit"},
	{errBulkheadFull, "bulkhead_full"},
	{errRateLimited, "rate_limited"},
	{throttle.ErrThrottled, "throttled"},
	{ErrLedgerUnavailable, "ledger_unavailable"},
	{ErrDuplicateInFlight, "duplicate_in_flight"},
	{ErrIdempotencyConflict, "idempotency_conflict"},
	{ErrAlreadyApplied, "already_applied"},
	{ErrReconcileRequired, "reconcile_required"},
	{ErrAttemptTimeout, "attempt_timeout"},
	{errFinal, "final"},
	{context.Canceled, "canceled"},
	{context.DeadlineExceeded, "deadline_exceeded"},
}

// ReasonName returns a stable snake_case name for a GiveUpInfo.Reason,
// or an error a call returned, for logs and metrics, matched with
// errors.Is in this order: attempts_exhausted, budget_exhausted,
// not_repeatable, failure_streak, call_cost, retry_after_too_long,
// deadline, circuit_open, slow_start (the ramp after a breaker closed or
// a learnt limit recovered), learnt_limit (the limit LoadPolicy.Adaptive
// learnt), bulkhead_full (LoadPolicy.MaxInFlight), rate_limited (the rate
// limiter, or the pace learnt from 429s), throttled, ledger_unavailable,
// duplicate_in_flight, idempotency_conflict, already_applied,
// reconcile_required (a write left uncertain, or a repeat of a key whose
// write is: a *ReconcileRequiredError), attempt_timeout (an attempt's own
// RetryPolicy.AttemptTimeout, not the caller's deadline), final, canceled
// or deadline_exceeded (the caller's context); "other" for any other
// error, which keeps the set of names bounded; "" for nil. The names are
// a compatibility promise; names may be added.
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
