package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A base may answer with a nil Body (http.Client tolerates it and puts an
// empty one in its place). With AttemptTimeout set, the transport wrapped
// that nil Body to release the attempt's context on Close: the caller got a
// non-nil Body whose Read and Close panicked.
func TestNilResponseBodyWithAttemptTimeoutDoesNotPanic(t *testing.T) {
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Request: r}, nil
	})
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, Retry: RetryPolicy{AttemptTimeout: time.Minute}})
	var (
		resp *http.Response
		body []byte
		err  error
	)
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("reading the response panicked: %v", p)
			}
		}()
		resp, body, err = do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://example.invalid/", ""))
	}()
	if err != nil || resp.StatusCode != http.StatusNoContent || len(body) != 0 {
		t.Fatalf("Do: got %v, %q, %v; want 204 with an empty body", resp, body, err)
	}
}

// An attempt cut by AttemptTimeout is a timeout of the dependency, not the
// caller's cancellation: the error must not match context.Canceled, which
// callers take to mean they gave up themselves (and often ignore). Like
// net/http's own timeouts, it matches context.DeadlineExceeded.
func TestAttemptTimeoutDoesNotMatchContextCanceled(t *testing.T) {
	srv := stallingServer(t, 2)
	tr := newTransport(t, nil, &Transport{Retry: RetryPolicy{MaxAttempts: 2, AttemptTimeout: 50 * time.Millisecond, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})

	_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if !errors.Is(err, ErrAttemptTimeout) || !errors.Is(err, ErrAttemptsExhausted) {
		t.Fatalf("Do: got %v, want ErrAttemptsExhausted after ErrAttemptTimeout", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("Do: %v matches context.Canceled; the caller cancelled nothing", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do: %v does not match context.DeadlineExceeded", err)
	}
}

// Response headers that never arrive are cut by AttemptTimeout on each
// attempt; the call ends in about MaxAttempts·AttemptTimeout, not at the
// server's leisure.
func TestHeadersThatNeverArriveAreCutByAttemptTimeout(t *testing.T) {
	const (
		attemptTimeout = 100 * time.Millisecond
		attempts       = 2
		backoff        = time.Millisecond
		margin         = 500 * time.Millisecond
	)
	srv := stallingServer(t, attempts) // the headers never come
	tr := newTransport(t, nil, &Transport{Retry: RetryPolicy{MaxAttempts: attempts, AttemptTimeout: attemptTimeout, InitialBackoff: backoff, MaxBackoff: backoff}})
	req := newRequest(t, testCtx(t), http.MethodGet, srv.URL, "")
	began := time.Now()
	_, _, err := do(tr, req)
	elapsed := time.Since(began)
	if !errors.Is(err, ErrAttemptTimeout) || !errors.Is(err, ErrAttemptsExhausted) {
		t.Errorf("Do error: got %v, want ErrAttemptsExhausted after ErrAttemptTimeout", err)
	}
	if lo, hi := attempts*attemptTimeout, attempts*(attemptTimeout+backoff)+margin; elapsed < lo || elapsed > hi {
		t.Errorf("call took %v, want between %v and %v", elapsed, lo, hi)
	}
	if got := srv.Requests(); got != attempts {
		t.Errorf("attempts that reached the server: got %d, want %d", got, attempts)
	}
}

// TestAttemptTimeoutInAndOutOfASynctestBubble runs calls with an
// AttemptTimeout inside a testing/synctest bubble, where the timeout
// strikes in the bubble's time, and then outside it. A timer belongs to
// the bubble it was made in: had the Transport kept its timers for reuse,
// one made inside and re-armed outside would be a fatal error.
func TestAttemptTimeoutInAndOutOfASynctestBubble(t *testing.T) {
	hang := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		<-req.Context().Done()
		return nil, req.Context().Err()
	})
	synctest.Test(t, func(t *testing.T) {
		tr := &Transport{Base: hang, Retry: RetryPolicy{AttemptTimeout: 10 * time.Second, MaxAttempts: 1}}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://dependency.test/", nil)
		require.NoError(t, err)
		start := time.Now()
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, ErrAttemptTimeout)
		assert.Equal(t, 10*time.Second, time.Since(start), "the timeout struck after the bubble's 10s")

		ok := &Transport{Base: staticBase{}, Retry: RetryPolicy{AttemptTimeout: 10 * time.Second}}
		for range 3 {
			resp, err := ok.RoundTrip(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
		}
	})
	tr := &Transport{Base: staticBase{}, Retry: RetryPolicy{AttemptTimeout: 10 * time.Second}}
	for range 3 {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://dependency.test/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
	}
}
