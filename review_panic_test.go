package retryfuse

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// panicBase answers 503 while status is 503, 200 while it is 200, and
// panics (after counting the request as received) while it is 0.
type panicBase struct {
	status atomic.Int32
	seen   atomic.Int32
}

func (b *panicBase) RoundTrip(r *http.Request) (*http.Response, error) {
	b.seen.Add(1)
	st := int(b.status.Load())
	if st == 0 {
		panic("rv: base RoundTripper panics")
	}
	return &http.Response{StatusCode: st, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// roundTripPanics calls rt.RoundTrip(req) and reports whether it panicked;
// the panic must reach the caller, never be swallowed.
func roundTripPanics(rt http.RoundTripper, req *http.Request) (panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	resp, err := rt.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return false
}

// A half-open scope lets MaxProbes probes out; a probe whose base panics
// (a panic a server's handler recovers, say) must still give its slot
// back, or the scope refuses every request forever: elapsed time alone
// never closes it.
func TestRvBasePanicDoesNotLeakABreakerProbeSlot(t *testing.T) {
	clock := newFakeClockAt(fixedStart)
	b, err := NewBreaker(BreakerSettings{FailureThreshold: 1, OpenTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.now = clock.Now
	base := &panicBase{}
	base.status.Store(503)
	tr := newNoWaitTransport(clock)
	tr.Base, tr.MaxAttempts, tr.Breaker, tr.Budget = base, 1, b, UnlimitedBudget{}
	const url = "http://rv-breaker.invalid/"

	resp, err := tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, url, ""))
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("first call: got %v, %v; want the 503 that opens the scope", resp, err)
	}
	clock.Advance(2 * time.Second) // the next call is a probe

	base.status.Store(0)
	if !roundTripPanics(tr, newRequest(t, testCtx(t), http.MethodGet, url, "")) {
		t.Fatal("the probe: the base's panic did not reach the caller")
	}

	base.status.Store(200)
	resp, err = tr.RoundTrip(newRequest(t, testCtx(t), http.MethodGet, url, ""))
	if err != nil {
		t.Fatalf("the call after the panicking probe: got %v; want it let through as a probe (slot given back)", err)
	}
	_ = resp.Body.Close()
	if got := b.State(HostScope(resp.Request)); got != BreakerClosed {
		t.Errorf("scope after a successful probe: got %v, want closed", got)
	}
}
