package retryfuse

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/evidence"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRetryableStatus(t *testing.T) {
	retryable := map[int]bool{408: true, 425: true, 429: true, 500: true, 502: true, 503: true, 504: true}
	for code := 100; code < 600; code++ {
		if got, want := evidence.RetryableStatus(code), retryable[code]; got != want {
			t.Errorf("RetryableStatus(%d) = %v, want %v", code, got, want)
		}
		resp := &http.Response{StatusCode: code}
		want := ClassFinal
		if retryable[code] {
			want = ClassRetryable
		}
		if got := defaultClassify(resp, nil); got != want {
			t.Errorf("defaultClassify(status %d) = %v, want %v", code, got, want)
		}
	}
}

// opErr wraps errno the way the net package does, inside the *url.Error
// that http.Client adds.
func opErr(op string, errno error) error {
	return &url.Error{Op: "Get", URL: "http://example.test/", Err: &net.OpError{
		Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno),
	}}
}

func TestDefaultRulesForErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"ECONNRESET in OpError in url.Error", opErr("read", syscall.ECONNRESET), ClassRetryable},
		{"ECONNREFUSED in OpError in url.Error", opErr("dial", syscall.ECONNREFUSED), ClassRetryable},
		{"ECONNABORTED", opErr("read", syscall.ECONNABORTED), ClassRetryable},
		{"EPIPE", opErr("write", syscall.EPIPE), ClassRetryable},
		{"ETIMEDOUT", opErr("read", syscall.ETIMEDOUT), ClassRetryable},
		{"EHOSTUNREACH", opErr("dial", syscall.EHOSTUNREACH), ClassRetryable},
		{"ENETUNREACH", opErr("dial", syscall.ENETUNREACH), ClassRetryable},
		{"io.EOF", io.EOF, ClassRetryable},
		{"wrapped io.EOF", fmt.Errorf("reading: %w", io.EOF), ClassRetryable},
		{"io.ErrUnexpectedEOF", io.ErrUnexpectedEOF, ClassRetryable},
		{"net/http's server closed idle connection", errors.New("http: server closed idle connection"), ClassRetryable},
		{"wrapped server closed idle connection", &url.Error{Op: "Put", URL: "http://x/", Err: errors.New("http: server closed idle connection")}, ClassRetryable},
		{"net.Error with Timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, ClassRetryable},
		{"attempt timeout over context.Canceled", &attemptTimeoutError{err: context.Canceled}, ClassRetryable},
		{"x509.UnknownAuthorityError", &url.Error{Op: "Get", URL: "https://x/", Err: x509.UnknownAuthorityError{}}, ClassFinal},
		{"tls.CertificateVerificationError over HostnameError", &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "x"}}, ClassFinal},
		{"x509.HostnameError", x509.HostnameError{Host: "x"}, ClassFinal},
		{"tls.RecordHeaderError", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, ClassFinal},
		{"context.Canceled", context.Canceled, ClassFinal},
		{"wrapped context.Canceled", &url.Error{Op: "Get", URL: "http://x/", Err: context.Canceled}, ClassFinal},
		{"DNS not found", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "nx.test", IsNotFound: true}}, ClassFinal},
		{"DNS temporary", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "server misbehaving", Name: "x.test", IsTemporary: true}}, ClassRetryable},
		{"DNS timeout", &net.DNSError{Err: "i/o timeout", Name: "x.test", IsTimeout: true}, ClassRetryable},
		{"unknown error", errors.New("unsupported protocol scheme"), ClassFinal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := defaultClassify(nil, tt.err); got != tt.want {
				t.Errorf("defaultClassify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassifyOutcomeAndPhase(t *testing.T) {
	reset := opErr("read", syscall.ECONNRESET)
	tests := []struct {
		name          string
		resp          *http.Response
		err           error
		phase         decide.Phase
		callerDone    bool
		bodyErr       bool
		wantOutcome   decide.Outcome
		wantPhase     decide.Phase
		wantRetryable bool
	}{
		{"200", &http.Response{StatusCode: 200}, nil, decide.PhasePostWrite, false, false, decide.OutcomeSuccess, decide.PhasePostWrite, false},
		{"404", &http.Response{StatusCode: 404}, nil, decide.PhasePostWrite, false, false, decide.OutcomeSuccess, decide.PhasePostWrite, false},
		{"503", &http.Response{StatusCode: 503}, nil, decide.PhasePostWrite, false, false, decide.OutcomeFailure, decide.PhasePostWrite, true},
		{"refused before writing", nil, opErr("dial", syscall.ECONNREFUSED), decide.PhasePreWrite, false, false, decide.OutcomeFailure, decide.PhasePreWrite, true},
		{"reset after writing", nil, reset, decide.PhasePostWrite, false, false, decide.OutcomeUnknown, decide.PhasePostWrite, true},
		{"reset, phase unknown", nil, reset, decide.PhaseUnknown, false, false, decide.OutcomeUnknown, decide.PhaseUnknown, true},
		{"attempt timeout after writing", nil, &attemptTimeoutError{err: context.Canceled}, decide.PhasePostWrite, false, false, decide.OutcomeTimeout, decide.PhasePostWrite, true},
		{"caller deadline after writing", nil, context.DeadlineExceeded, decide.PhasePostWrite, true, false, decide.OutcomeTimeout, decide.PhasePostWrite, false},
		{"caller cancel after writing", nil, context.Canceled, decide.PhasePostWrite, true, false, decide.OutcomeUnknown, decide.PhasePostWrite, false},
		{"caller cancel before writing", nil, context.Canceled, decide.PhasePreWrite, true, false, decide.OutcomeFailure, decide.PhasePreWrite, false},
		{"caller body reader failed", nil, errors.New("disk gone"), decide.PhasePostWrite, false, true, decide.OutcomeFailure, decide.PhasePostWrite, false},
		{"unknown error after writing", nil, errors.New("malformed"), decide.PhasePostWrite, false, false, decide.OutcomeUnknown, decide.PhasePostWrite, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := classify(nil, tt.resp, tt.err, tt.phase, tt.callerDone, tt.bodyErr)
			if got.outcome != tt.wantOutcome || got.phase != tt.wantPhase || got.retryable != tt.wantRetryable {
				t.Errorf("classify = {%v %v retryable=%v}, want {%v %v retryable=%v}",
					got.outcome, got.phase, got.retryable, tt.wantOutcome, tt.wantPhase, tt.wantRetryable)
			}
		})
	}
}

func TestClassifyUsesClassifierAndSurvivesItsPanic(t *testing.T) {
	notFound := &http.Response{StatusCode: 404}
	retry404 := func(resp *http.Response, err error) Class {
		if resp != nil && resp.StatusCode == 404 {
			return ClassRetryable
		}
		return ClassDefault
	}
	if got := classify(retry404, notFound, nil, decide.PhasePostWrite, false, false); !got.retryable || got.outcome != decide.OutcomeFailure {
		t.Errorf("404 with a classifier retrying it: got {%v retryable=%v}, want {failure retryable=true}", got.outcome, got.retryable)
	}
	final503 := func(*http.Response, error) Class { return ClassFinal }
	if got := classify(final503, &http.Response{StatusCode: 503}, nil, decide.PhasePostWrite, false, false); got.retryable || got.outcome != decide.OutcomeSuccess {
		t.Errorf("503 with a classifier calling it final: got {%v retryable=%v}, want {success retryable=false}", got.outcome, got.retryable)
	}
	panicky := func(*http.Response, error) Class { panic("classifier bug") }
	if got := classify(panicky, &http.Response{StatusCode: 503}, nil, decide.PhasePostWrite, false, false); !got.retryable {
		t.Errorf("503 with a panicking classifier: got retryable=%v, want true (the default rules)", got.retryable)
	}
	if got := classify(panicky, nil, io.EOF, decide.PhasePreWrite, false, false); !got.retryable {
		t.Errorf("EOF with a panicking classifier: got retryable=%v, want true (the default rules)", got.retryable)
	}
	// The caller's own cancellation is settled before any classifier.
	always := func(*http.Response, error) Class { return ClassRetryable }
	if got := classify(always, nil, context.Canceled, decide.PhasePreWrite, true, false); got.retryable {
		t.Errorf("caller cancellation with a classifier retrying everything: got retryable=true, want false")
	}
}

// A *breaker.OpenError unwraps to the failure that opened the circuit, a
// refused connection say; it is nonetheless a local refusal, nothing was
// sent, and repeating it within a backoff cannot succeed.
func TestCircuitOpenErrorIsNotTransient(t *testing.T) {
	err := &breaker.OpenError{Scope: "http://rv.invalid:80", Cause: syscall.ECONNREFUSED}
	if got := defaultClassify(nil, err); got != ClassFinal {
		t.Errorf("defaultClassify(*breaker.OpenError caused by ECONNREFUSED): got %v, want ClassFinal", got)
	}
}

// A server's retry hint decides by default: "true" is retried whatever the
// status (where the safety rules allow), "false" never, not even by a
// Classifier that says retryable.
func TestServerRetryHints(t *testing.T) {
	resp := func(status int, name, value string) *http.Response {
		r := &http.Response{StatusCode: status, Header: http.Header{}}
		if name != "" {
			r.Header.Set(name, value)
		}
		return r
	}
	always := func(*http.Response, error) Class { return ClassRetryable }
	tests := []struct {
		name string
		c    Classifier
		resp *http.Response
		want bool
	}{
		{"409 with X-Should-Retry true", nil, resp(409, "X-Should-Retry", "true"), true},
		{"409 with Stripe-Should-Retry true", nil, resp(409, "Stripe-Should-Retry", "true"), true},
		{"503 with X-Should-Retry false", nil, resp(503, "X-Should-Retry", "false"), false},
		{"503 with Stripe-Should-Retry false", nil, resp(503, "Stripe-Should-Retry", "False"), false},
		{"503 with false, Classifier says retryable", always, resp(503, "Stripe-Should-Retry", "false"), false},
		{"409 with true, Classifier says final", func(*http.Response, error) Class { return ClassFinal }, resp(409, "X-Should-Retry", "true"), false},
		{"503 without a hint", nil, resp(503, "", ""), true},
		{"409 without a hint", nil, resp(409, "", ""), false},
		{"503 with a hint that says neither", nil, resp(503, "X-Should-Retry", "maybe"), true},
	}
	for _, tt := range tests {
		got := classify(tt.c, tt.resp, nil, decide.PhasePostWrite, false, false)
		if got.retryable != tt.want {
			t.Errorf("%s: got retryable %v, want %v", tt.name, got.retryable, tt.want)
		}
	}
}

// Through the Transport: a 503 the server says not to retry is sent once,
// and a POST without a key is not repeated because a server says "true".
func TestServerRetryHintsThroughTheTransport(t *testing.T) {
	no := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Stripe-Should-Retry", "false")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}})
	resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, no.URL, ""))
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, 1, no.count(), "a response the server says not to retry is not retried")

	yes := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Should-Retry", "true")
		w.WriteHeader(http.StatusConflict)
	})
	_, _, err = do(tr, newRequest(t, testCtx(t), http.MethodPost, yes.URL, "order"))
	require.NoError(t, err)
	assert.Equal(t, 1, yes.count(), "a POST without a key is not repeated, whatever the server says")
	req := newRequest(t, testCtx(t), http.MethodPost, yes.URL, "order")
	req.Header.Set("Idempotency-Key", "k-hint")
	_, _, err = do(tr, req)
	require.NoError(t, err)
	assert.Equal(t, 1+3, yes.count(), "a keyed POST the server says to retry is retried up to MaxAttempts")
}
