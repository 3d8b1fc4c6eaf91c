package retryfuse

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/evidence"
)

// This file is how an attempt's outcome is judged: a Classifier's Class,
// the default rules over the evidence (internal/evidence), one attempt's
// result; and MayRetry, the same judgement offered to a retry layer
// above the Transport.

// Class is a Classifier's verdict on one attempt.
type Class uint8

const (
	// ClassDefault: apply the default rules (see Classifier).
	ClassDefault Class = iota
	// ClassRetryable: a failure worth another attempt, if the request-safety
	// rules, the budget, the attempts and the deadline allow one.
	ClassRetryable
	// ClassFinal: hand the response or error back as it is.
	ClassFinal
)

// A Classifier changes how responses and errors are classified. It is
// called with the response (err nil) or the error (resp nil) of one
// attempt and may return ClassDefault to keep the default rules. It only
// says whether a result is worth repeating: the request-safety rules apply
// on top, so ClassRetryable never makes a POST without an idempotency key
// repeatable, and never replays a write whose outcome is uncertain.
//
// The default rules:
//
//   - A response whose X-Should-Retry or Stripe-Should-Retry header is
//     "true" is retryable, whatever its status; "false" is final, and no
//     Classifier makes it retryable: the server has said it must not be
//     repeated.
//   - Retryable: the statuses 408, 425, 429, 500, 502, 503 and 504; and
//     transient transport errors: connection refused, reset or aborted, a
//     broken pipe, EOF (net/http's "server closed idle connection"
//     included), an HTTP/2 stream reset with INTERNAL_ERROR or
//     REFUSED_STREAM (the HTTP/2 form of a reset: a Go server sends it when
//     a handler aborts), timeouts (net.Error.Timeout), an unreachable host
//     or network, a temporary DNS failure.
//   - Final: every other status, a cancellation, certificate and TLS
//     verification failures, a host that does not exist, a breaker's
//     refusal (a *breaker.OpenError, whatever the failure that opened the
//     circuit), and any error not known to be transient (an unsupported
//     scheme, a malformed request).
//
// The transport recognises the caller's own cancellation or deadline, and
// an error of the caller's body reader, before any classifier is asked:
// those are never repeated.
//
// A Classifier must not read or close the response body.
type Classifier func(resp *http.Response, err error) Class

// defaultClassify is the default classification; see Classifier.
func defaultClassify(resp *http.Response, err error) Class {
	if err == nil {
		if resp == nil {
			return ClassFinal
		}
		yes, _ := evidence.ServerHints(resp.Header)
		return defaultResponseClass(resp, yes)
	}
	if transientError(err) {
		return ClassRetryable
	}
	return ClassFinal
}

// defaultResponseClass is the default classification of resp, whose
// server said yes to a retry or not.
func defaultResponseClass(resp *http.Response, yes bool) Class {
	if yes || evidence.RetryableStatus(resp.StatusCode) {
		return ClassRetryable
	}
	return ClassFinal
}

// transientError reports whether err is known to be transient. The
// transport's own errors are judged here; the network's evidence, in
// package evidence. Anything not recognised is not transient: the
// transport repeats only what it understands.
func transientError(err error) bool {
	switch {
	case errors.Is(err, ErrAttemptTimeout):
		return true // before evidence's Canceled test: the attempt's context was cancelled by its timer
	case errors.Is(err, ErrCircuitOpen):
		// A local refusal, nothing sent: it unwraps to the failure that
		// opened the circuit, but repeating it cannot succeed before the
		// breaker's open interval ends.
		return false
	case errors.Is(err, ErrReconcileRequired):
		// A retryfuse Transport below found the write uncertain: its cause
		// may look transient, but the write must not be repeated.
		return false
	}
	return evidence.Transient(err)
}

// result is the classification of one attempt.
type result struct {
	outcome   decide.Outcome
	phase     decide.Phase
	retryable bool // worth another attempt, before the safety rules
	ignored   bool // not evidence about the dependency (the caller's own doing)
	panicked  any  // what a user's Classifier panicked with, for the call to report
}

// classify turns one attempt into a result. callerDone reports whether the
// caller's own context had ended when the attempt returned; bodyErr whether
// the caller's body reader failed.
func classify(c Classifier, resp *http.Response, err error, phase decide.Phase, callerDone, bodyErr bool) result {
	if err == nil {
		r := result{outcome: decide.OutcomeSuccess, phase: decide.PhasePostWrite} // a response came after the write
		// The server's retry hints, read once.
		var yes, no bool
		if resp != nil {
			yes, no = evidence.ServerHints(resp.Header)
		}
		class := ClassDefault
		if c != nil {
			class, r.panicked = safeClassify(c, resp, nil)
		}
		if class == ClassDefault {
			class = ClassFinal
			if resp != nil {
				class = defaultResponseClass(resp, yes)
			}
		}
		if no {
			class = ClassFinal // the server forbids a retry
		}
		if class == ClassRetryable {
			r.outcome, r.retryable = decide.OutcomeFailure, true
		}
		return r
	}
	r := result{phase: phase}
	switch {
	case callerDone:
		r.ignored = true
		// The caller stopped the call: never repeated. After a write its
		// outcome is as uncertain as any timeout.
		r.outcome = decide.OutcomeFailure
		if phase != decide.PhasePreWrite { // it may have been written
			r.outcome = decide.OutcomeTimeout
			if !errors.Is(err, context.DeadlineExceeded) {
				r.outcome = decide.OutcomeUnknown
			}
		}
		return r
	case bodyErr:
		r.ignored = true
		// The request was cut short by the caller's own body: the server
		// cannot have a complete request to apply.
		r.outcome = decide.OutcomeFailure
		return r
	}
	class := ClassDefault
	if c != nil {
		class, r.panicked = safeClassify(c, nil, err)
	}
	if class == ClassDefault {
		class = defaultClassify(nil, err)
	}
	r.retryable = class == ClassRetryable
	var ne net.Error
	timeout := errors.Is(err, ErrAttemptTimeout) || (errors.As(err, &ne) && ne.Timeout())
	switch {
	case timeout:
		r.outcome = decide.OutcomeTimeout
	case phase == decide.PhasePreWrite:
		r.outcome = decide.OutcomeFailure
	default:
		r.outcome = decide.OutcomeUnknown // a reset or EOF after a write
	}
	return r
}

// safeClassify calls a user's Classifier; a panic counts as ClassDefault,
// and is returned for the call to report (hookPanicked).
func safeClassify(c Classifier, resp *http.Response, err error) (class Class, panicked any) {
	defer func() {
		if v := recover(); v != nil {
			class, panicked = ClassDefault, v
		}
	}()
	return c(resp, err), nil
}

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
