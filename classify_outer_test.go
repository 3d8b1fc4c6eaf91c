package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key given as any spelling of the header is the request's key: the POST
// is repeated, no key is generated beside it, and the server sees exactly
// the one value on every attempt.
func TestKeyHeaderInAnySpellingIsTheKey(t *testing.T) {
	for _, name := range []string{"IDEMPOTENCY-KEY", "idempotency-KEY", "X-IDEMPOTENCY-KEY"} {
		t.Run(name, func(t *testing.T) {
			srv := newTestServer(t, failThenOK(1))
			tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}, Keys: KeyPolicy{Generate: true}})
			req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "order")
			req.Header[name] = []string{"order-9"}
			resp, _, err := do(tr, req)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode, "the keyed POST is repeated after the 503")
			reqs := srv.requests()
			require.Len(t, reqs, 2, "got %d requests, want 2: a keyed POST is repeated", len(reqs))
			for i, r := range reqs {
				var values []string
				for k, v := range r.Header {
					if isKeyHeader(k) {
						values = append(values, v...)
					}
				}
				assert.Equal(t, []string{"order-9"}, values, "request %d: got key values %v, want exactly [order-9]", i+1, values)
			}
		})
	}
}

// IdempotencyKeyOf reads the key under any spelling.
func TestIdempotencyKeyOfAnySpelling(t *testing.T) {
	for _, name := range []string{"Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY", "X-Idempotency-Key", "x-IDEMPOTENCY-key"} {
		got, ok := IdempotencyKeyOf(http.Header{name: {"k1"}, "Content-Type": {"text/plain"}})
		assert.True(t, ok && got == "k1", "%s: got %q, %v; want k1, true", name, got, ok)
	}
	_, ok := IdempotencyKeyOf(http.Header{"Idempotency-Keys": {"k1"}, "Idempotency": {"k1"}})
	assert.False(t, ok, "a header that only looks like the key's is not the key")
}

// Two spellings that disagree are refused before anything is sent.
func TestKeyHeadersThatDisagreeAreRefused(t *testing.T) {
	srv := statusServer(t, http.StatusOK, "ok")
	tr := newTransport(t, newFakeClock(), &Transport{})
	req := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "order")
	req.Header["Idempotency-Key"] = []string{"a"}
	req.Header["IDEMPOTENCY-KEY"] = []string{"b"}
	_, _, err := do(tr, req)
	assert.ErrorIs(t, err, ErrInvalidIdempotencyKey)
	assert.Zero(t, srv.count(), "nothing is sent")
}

// The errors of a timed-out call report Timeout() through http.Client's
// *url.Error and os.IsTimeout, as net/http's own do; and the message of
// an attempt timeout does not claim a cancellation the chain denies.
func TestTimedOutCallsReportTimeout(t *testing.T) {
	stall := stallingServer(t, 4) // the attempts of the cases below, none answered
	tests := []struct {
		name string
		tr   *Transport
		req  func(t *testing.T) *http.Request
		want func(t *testing.T, err error)
	}{
		{"one attempt, AttemptTimeout", &Transport{Retry: RetryPolicy{MaxAttempts: 1, AttemptTimeout: 20 * time.Millisecond}},
			func(t *testing.T) *http.Request { return newRequest(t, testCtx(t), http.MethodGet, stall.URL, "") },
			func(t *testing.T, err error) { var re *RetryError; assert.ErrorAs(t, err, &re) }},
		{"attempts exhausted on timeouts", &Transport{Retry: RetryPolicy{MaxAttempts: 2, AttemptTimeout: 20 * time.Millisecond, Budget: budget.Unlimited()}},
			func(t *testing.T) *http.Request { return newRequest(t, testCtx(t), http.MethodGet, stall.URL, "") },
			func(t *testing.T, err error) { assert.ErrorIs(t, err, ErrAttemptsExhausted) }},
		{"reconcile error after the caller's deadline", &Transport{},
			func(t *testing.T) *http.Request {
				ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond) // time to write the POST before it strikes
				t.Cleanup(cancel)
				req := newRequest(t, ctx, http.MethodPost, stall.URL, "order")
				req.Header.Set("Idempotency-Key", "order-1")
				return req
			},
			func(t *testing.T, err error) { assert.ErrorIs(t, err, ErrReconcileRequired) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTransport(t, newFakeClock(), tt.tr)
			_, err := (&http.Client{Transport: tr}).Do(tt.req(t))
			require.Error(t, err)
			tt.want(t, err)
			var ue *url.Error
			require.ErrorAs(t, err, &ue)
			assert.True(t, ue.Timeout(), "url.Error.Timeout(): got false, want true (%v)", err)
			assert.True(t, os.IsTimeout(err), "os.IsTimeout: got false, want true (%v)", err)
			if !errors.Is(err, context.Canceled) {
				assert.NotContains(t, err.Error(), "context canceled", "the message names a cancellation the chain does not hold")
			}
		})
	}
}

func TestNonTimeoutErrorsDoNotReportTimeout(t *testing.T) {
	assert.False(t, (&RetryError{Reason: ErrBudgetExhausted, Last: errors.New("connection refused")}).Timeout())
	assert.False(t, (&ReconcileRequiredError{Cause: errors.New("connection reset")}).Timeout())
	assert.True(t, (&ReconcileRequiredError{Cause: fmt.Errorf("wrapped: %w", context.DeadlineExceeded)}).Timeout())
}

func TestMayRetry(t *testing.T) {
	no := []error{
		nil,
		&ReconcileRequiredError{Cause: errors.New("reset")},
		&RetryError{Reason: ErrNotRepeatable},
		&RetryError{Reason: ErrBudgetExhausted, Last: errors.New("503")},
		&breaker.OpenError{Scope: "api"},
		&RetryError{Reason: ErrDuplicateInFlight},
		&RetryError{Reason: ErrIdempotencyConflict},
		&RetryError{Reason: ErrAttemptsExhausted, Last: errors.New("reset")},
		&RetryError{Reason: ErrFailureStreak},
		&RetryError{Reason: ErrCallCost},
		&RetryError{Reason: ErrDeadline},
		fmt.Errorf("%w: Base must not be the Transport itself", ErrInvalidPolicy),
		fmt.Errorf("%w: empty", ErrInvalidIdempotencyKey),
		fmt.Errorf("%w: store down", ErrLedgerUnavailable),
		&BulkheadFullError{Scope: "api", MaxInFlight: 8},
		&RateLimitError{Scope: "api", RetryAfter: time.Second},
		&RetryError{Reason: &RateLimitError{Scope: "api"}, Last: errors.New("503")},
		context.Canceled,
		&url.Error{Op: "Post", URL: "http://x", Err: context.DeadlineExceeded},
		&url.Error{Op: "Post", URL: "http://x", Err: &RetryError{Reason: ErrBudgetExhausted}},
	}
	for _, err := range no {
		assert.False(t, MayRetry(err), "MayRetry(%v): got true, want false", err)
	}
	// A bare transient error was never returned by the Transport: it comes
	// from reading a body, after the request was answered.
	for _, err := range []error{io.ErrUnexpectedEOF, fmt.Errorf("read body: %w", syscall.ECONNRESET), io.EOF} {
		assert.False(t, MayRetry(err), "MayRetry(%v): got true, want false (an error reading a response)", err)
	}
	for _, err := range []error{errors.New("x509: certificate signed by unknown authority"), &url.Error{Op: "Get", URL: "http://x", Err: errors.New("malformed HTTP response")}} {
		assert.True(t, MayRetry(err), "MayRetry(%v): got false, want true", err)
	}
}

// A key fixed in the context is the key of every request sent with it that
// carries none: an outer retry that sends the request again with the same
// context sends the same key, and the POST may be repeated.
func TestKeyFromTheContextSurvivesOuterRetries(t *testing.T) {
	srv := newTestServer(t, failThenOK(1))
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 1}, Keys: KeyPolicy{Generate: true}})
	ctx := WithIdempotencyKey(testCtx(t), "order-77")
	client := &http.Client{Transport: tr}
	var last *http.Response
	for range 2 { // an outer loop of two
		resp, err := client.Do(newRequest(t, ctx, http.MethodPost, srv.URL, "order"))
		require.NoError(t, err)
		resp.Body.Close()
		last = resp
	}
	assert.Equal(t, http.StatusOK, last.StatusCode)
	reqs := srv.requests()
	require.Len(t, reqs, 2)
	for i, r := range reqs {
		got, _ := IdempotencyKeyOf(r.Header)
		assert.Equal(t, "order-77", got, "request %d: got key %q, want the context's", i+1, got)
	}

	_, _, err := do(tr, newRequest(t, WithIdempotencyKey(testCtx(t), "bad\nkey"), http.MethodPost, srv.URL, "order"))
	assert.ErrorIs(t, err, ErrInvalidIdempotencyKey)
	assert.Len(t, srv.requests(), 2, "an invalid key sends nothing")
}

// A call ended by the caller's deadline gives that deadline as its
// reason, in the hook and by name, not "final".
func TestCallerDeadlineIsTheGiveUpReason(t *testing.T) {
	srv := stallingServer(t, 1)
	var reasons []error
	tr := newTransport(t, newFakeClock(), &Transport{Hooks: Hooks{GiveUp: func(i GiveUpInfo) { reasons = append(reasons, i.Reason) }}})
	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Millisecond)
	defer cancel()
	_, _, err := do(tr, newRequest(t, ctx, http.MethodGet, srv.URL, ""))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, reasons, 1)
	assert.ErrorIs(t, reasons[0], context.DeadlineExceeded)
	assert.Equal(t, "deadline_exceeded", ReasonName(reasons[0]))
}

// A keyed write cut by its own AttemptTimeout, under no deadline of the
// caller's, is named for what it is: a write left uncertain, whose cause
// is the attempt's timeout, never the caller's deadline.
func TestAttemptTimeoutOfAKeyedWriteIsNotTheCallersDeadline(t *testing.T) {
	srv := stallingServer(t, 1)
	var reasons []error
	tr := newTransport(t, newFakeClock(), &Transport{
		Retry: RetryPolicy{AttemptTimeout: 30 * time.Millisecond},
		Hooks: Hooks{GiveUp: func(i GiveUpInfo) { reasons = append(reasons, i.Reason) }},
	})
	_, _, err := do(tr, newRequest(t, WithIdempotencyKey(testCtx(t), "k-1"), http.MethodPost, srv.URL, "order"))
	require.ErrorIs(t, err, ErrReconcileRequired)
	assert.ErrorIs(t, err, ErrAttemptTimeout)
	assert.Equal(t, "reconcile_required", ReasonName(err))
	assert.Empty(t, reasons, "GiveUp is not called for a write left uncertain (Hooks.Reconcile is)")
}
