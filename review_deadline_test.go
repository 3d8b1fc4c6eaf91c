package retryfuse

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The wait before a retry selects between its timer and the caller's
// context; when both are ready, Go picks either, so the wait may end
// "on time" with the caller's context already done. No attempt may start
// then: the seam below ends the wait that way.
func TestRvNoRetryStartsAfterTheCallerIsDone(t *testing.T) {
	var sent atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return &http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	ctx, cancel := context.WithCancel(testCtx(t))
	tr := newTransport(t, nil, &Transport{Base: base, MaxAttempts: 3, Budget: UnlimitedBudget{}})
	tr.sleep = func(context.Context, time.Duration) error {
		cancel() // the caller gives up as the timer fires
		return nil
	}

	resp, err := tr.RoundTrip(newRequest(t, ctx, http.MethodGet, "http://rv.invalid/", ""))
	if err == nil {
		_ = resp.Body.Close()
	}
	if got := sent.Load(); got != 1 {
		t.Errorf("attempts sent: got %d, want 1 (none after the caller's context was done)", got)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("RoundTrip: got %v, %v; want an error matching context.Canceled", resp, err)
	}
}
