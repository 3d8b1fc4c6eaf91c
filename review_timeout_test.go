package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// An attempt cut by AttemptTimeout is a timeout of the dependency, not the
// caller's cancellation: the error must not match context.Canceled, which
// callers take to mean they gave up themselves (and often ignore). Like
// net/http's own timeouts, it matches context.DeadlineExceeded.
func TestRvAttemptTimeoutDoesNotMatchContextCanceled(t *testing.T) {
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
