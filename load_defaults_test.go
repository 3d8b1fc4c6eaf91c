package retryfuse

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
)

// A Breaker brings no slow start unless Load.SlowStart asks for one: after
// it closes, a burst of 50 concurrent calls to the healthy dependency is
// sent whole.
func TestBreakerAloneBringsNoSlowStart(t *testing.T) {
	noGoroutineLeft(t)
	clk := newFakeClockAt(fixedStart)
	base := newLoadBase()
	base.status.Store(http.StatusServiceUnavailable)
	brk, err := breaker.New(breaker.Settings{FailureThreshold: 1, OpenTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var ev events
	tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1}, Brake: BrakePolicy{Breaker: brk}, Hooks: Hooks{Policy: ev.hook}})
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")); err != nil {
		t.Fatal(err) // the 503, which opens the scope
	}
	clk.Advance(time.Second)
	base.status.Store(http.StatusOK)
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")); err != nil {
		t.Fatal(err) // the probe, which closes it
	}
	if got := brk.StateAt("http://dep.test:80", clk.Now()); got != breaker.Closed {
		t.Fatalf("breaker: %v, want closed after the probe", got)
	}
	base.hold = make(chan struct{})
	release := heldCalls(t, tr, base, 50) // all 50 arrive, or it fails
	for i, err := range release() {
		if err != nil {
			t.Errorf("call %d of the burst: %v, want it served", i, err)
		}
	}
	if got := ev.of(policySlowStart, actionStarted); len(got) != 0 {
		t.Errorf("slow start events: got %+v, want none without Load.SlowStart", got)
	}
}

// With the pace on, a 429 whose Retry-After opens the scope's breaker
// leaves the next call to the breaker: it fails fast with the open
// breaker's error, sending nothing and waiting for nothing, rather than
// waiting out the Retry-After in the pace and going out as a probe.
func TestOpenBreakerFailsFastBeforeThePace(t *testing.T) {
	for _, retryAfter := range []string{"1", "3"} {
		t.Run("Retry-After "+retryAfter, func(t *testing.T) {
			clk := newFakeClockAt(fixedStart)
			var sent int
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				sent++
				h := http.Header{}
				h.Set("Retry-After", retryAfter)
				return &http.Response{StatusCode: http.StatusTooManyRequests, Header: h,
					Body: http.NoBody, Request: req}, nil
			})
			brk, err := breaker.New(breaker.Settings{FailureThreshold: 1, OpenTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1},
				Brake: BrakePolicy{Breaker: brk}, Load: LoadPolicy{Pace: true, MaxWait: 5 * time.Second}})
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			if err != nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("the first call: got %v, %v; want its 429", resp, err)
			}
			_, _, err = do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			var open *breaker.OpenError
			if !errors.As(err, &open) || !errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("the next call: got %v, want the open breaker's error", err)
			}
			if sent != 1 {
				t.Errorf("requests sent: got %d, want 1: an open breaker sends nothing", sent)
			}
			if waits := clk.Sleeps(); len(waits) != 0 || !clk.Now().Equal(fixedStart) {
				t.Errorf("waits %v, clock moved by %v; want none: an open breaker fails fast", waits, clk.Now().Sub(fixedStart))
			}
			if strings.Contains(err.Error(), "rate limited") {
				t.Errorf("error %q: the pace, not the breaker, refused", err)
			}
		})
	}
}
