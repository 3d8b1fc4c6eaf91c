package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A base may answer with a nil Body (http.Client tolerates it and puts an
// empty one in its place). With AttemptTimeout set, the transport wrapped
// that nil Body to release the attempt's context on Close: the caller got a
// non-nil Body whose Read and Close panicked.
func TestNilResponseBodyWithAttemptTimeoutDoesNotPanic(t *testing.T) {
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Request: r}, nil
	})
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, AttemptTimeout: time.Minute})
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
	srv := newTestServer(t, stallUntilGone)
	tr := newTransport(t, nil, &Transport{MaxAttempts: 2, AttemptTimeout: 50 * time.Millisecond, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})

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

// When GetBody fails for a retry, that retry is never sent: the error
// reports the attempts actually made, and its Last is still the last
// attempt's error (with GetBody's beside it), as RetryError documents.
func TestGetBodyFailureReportsTheAttemptsMade(t *testing.T) {
	url := refusedURL(t)
	var log hookLog
	tr := newTransport(t, newFakeClock(), &Transport{MaxAttempts: 3, Budget: UnlimitedBudget{}, Hooks: log.hooks()})
	errGetBody := errors.New("rv: body source gone")
	var calls atomic.Int32
	req := newRequest(t, testCtx(t), http.MethodPut, url, "payload")
	req.GetBody = func() (io.ReadCloser, error) {
		calls.Add(1)
		return nil, errGetBody
	}
	req.Body = io.NopCloser(strings.NewReader("payload"))

	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("RoundTrip: got %v, nil; want an error", resp)
	}
	var re *RetryError
	if !errors.As(err, &re) {
		t.Fatalf("RoundTrip: got %v, want a *RetryError", err)
	}
	if re.Attempts != 1 {
		t.Errorf("RetryError.Attempts: got %d, want 1 (the retry whose body could not be had was not sent)", re.Attempts)
	}
	for _, want := range []error{ErrNotRepeatable, syscall.ECONNREFUSED, errGetBody} {
		if !errors.Is(err, want) {
			t.Errorf("RoundTrip error %q: does not match %v", err, want)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.giveUps) != 1 || log.giveUps[0].Attempt != 1 {
		t.Errorf("GiveUp events: got %+v, want one about attempt 1", log.giveUps)
	}
}
