package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// healthyBase answers 200 after latency, counting what it received; the
// status of the first answers may be set otherwise (failFirst of them
// 503).
type healthyBase struct {
	latency   time.Duration
	failFirst int64
	received  atomic.Int64
}

func (b *healthyBase) RoundTrip(req *http.Request) (*http.Response, error) {
	n := b.received.Add(1)
	code := http.StatusOK
	if n <= b.failFirst {
		code = http.StatusServiceUnavailable
	}
	select {
	case <-time.After(b.latency):
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// burst sends n concurrent GETs through tr, each with a deadline of
// deadline, and returns the errors and the statuses.
func burst(t *testing.T, tr *Transport, n int, deadline time.Duration) (errs []error, codes []int) {
	t.Helper()
	errs, codes = make([]error, n), make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://dep.test/", nil)
			if err != nil {
				errs[i] = err
				return
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				errs[i] = err
				return
			}
			codes[i] = resp.StatusCode
			_ = resp.Body.Close()
		})
	}
	wg.Wait()
	return errs, codes
}

// A cold learnt limit queues a healthy burst rather than refusing it: 32
// callers at once, each with a deadline of 1s, to a dependency that
// answers in 10ms, are all served (the limit starts at 4).
func TestColdLearntLimitQueuesAHealthyBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &healthyBase{latency: 10 * time.Millisecond}
		tr := &Transport{Base: base, Load: LoadPolicy{Adaptive: true}}
		errs, codes := burst(t, tr, 32, time.Second)
		for i := range errs {
			if errs[i] != nil || codes[i] != http.StatusOK {
				t.Errorf("caller %d: got %d, %v; want 200", i, codes[i], errs[i])
			}
		}
		if got := base.received.Load(); got != 32 {
			t.Errorf("received: got %d, want 32", got)
		}
	})
}

// Slow start after a breaker closes queues a healthy burst within MaxWait:
// 50 callers at once, each with a deadline of 1s, are all served while
// admission ramps up from the breaker's one probe.
func TestSlowStartQueuesAHealthyBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &healthyBase{latency: 10 * time.Millisecond, failFirst: 1}
		brk, err := breaker.New(breaker.Settings{FailureThreshold: 1, OpenTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var started atomic.Int32
		tr := &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1}, Brake: BrakePolicy{Breaker: brk},
			Load: LoadPolicy{SlowStart: time.Second},
			Hooks: Hooks{Policy: func(i PolicyInfo) {
				if i.Policy == policySlowStart && i.Action == actionStarted {
					started.Add(1)
				}
			}}}
		burst(t, tr, 1, time.Second) // the 503 that opens the scope
		time.Sleep(time.Second)
		if errs, codes := burst(t, tr, 1, time.Second); errs[0] != nil || codes[0] != http.StatusOK {
			t.Fatalf("the probe: got %d, %v; want 200, closing the breaker", codes[0], errs[0])
		}
		if started.Load() != 1 {
			t.Fatalf("slow start: started %d times, want once", started.Load())
		}
		errs, codes := burst(t, tr, 50, time.Second)
		for i := range errs {
			if errs[i] != nil || codes[i] != http.StatusOK {
				t.Errorf("caller %d: got %d, %v; want 200", i, codes[i], errs[i])
			}
		}
	})
}

// With the throttle on, a replayed answer (Idempotent-Replayed) counts as
// accepted: a restarted client that sends again 300 keys its server has
// completed, through a proxy that answers one request in ten 503, has
// none refused before sending.
func TestThrottleCountsReplayedAnswersAsAccepted(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	var received atomic.Int64
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		n := received.Add(1)
		h := http.Header{}
		code := http.StatusOK
		if n%10 == 0 {
			code = http.StatusServiceUnavailable // the proxy in front
		} else {
			h.Set("Idempotent-Replayed", "true")
			h.Set("Idempotency-Key-Honoured", "?1")
		}
		return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: h,
			Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	})
	tr := newTransport(t, clk, &Transport{Base: base, Keys: KeyPolicy{ServerHonours: true}, Load: throttleOn})
	setRandN(tr, func(int64) int64 { return 0 }) // refuse whenever it may
	for i := range 300 {
		ctx := WithIdempotencyKey(testCtx(t), "order-"+strconv.Itoa(i))
		resp, _, err := do(tr, newRequest(t, ctx, http.MethodPost, "http://dep.test/orders", "{}"))
		if err != nil {
			t.Fatalf("call %d: %v, want the replayed answer (or the proxy's 503)", i, err)
		}
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("call %d: got %d, want 200 or 503", i, resp.StatusCode)
		}
		clk.Advance(10 * time.Millisecond)
	}
}

// The throttle never refuses a call that settles an uncertain write: one
// marked Reconciling goes out while the throttle refuses every new call.
func TestThrottleNeverRefusesACallMarkedReconciling(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	base := newLoadBase()
	base.status.Store(http.StatusServiceUnavailable)
	tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1}, Load: throttleOn})
	setRandN(tr, func(int64) int64 { return 0 }) // refuse whenever it may
	for range throttleMinRejects {
		if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")); err != nil {
			t.Fatalf("a call the dependency rejects: %v", err)
		}
	}
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")); ReasonName(err) != "throttled" {
		t.Fatalf("a new call: got %v, want it throttled", err)
	}
	base.status.Store(http.StatusOK)
	sent := base.sent.Load()
	resp, _, err := do(tr, newRequest(t, Reconciling(testCtx(t)), http.MethodGet, "http://dep.test/orders?key=k-1", ""))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a lookup marked Reconciling: got %v, %v; want it sent and answered", resp, err)
	}
	if got := base.sent.Load(); got != sent+1 {
		t.Errorf("sent: got %d more, want 1", got-sent)
	}
}

// downBudget is a shared budget whose store is down: it cannot establish
// its answer, and gives its fail-safe one (refuse), with the error.
type downBudget struct{}

func (downBudget) RecordRequest(context.Context) {}
func (downBudget) AllowRetry(context.Context) (bool, error) {
	return false, errors.New("budget store down")
}

// An app's own loop over an always-503 endpoint, through the zero
// LoadPolicy, with a budget whose store is down: every call gets the 503
// back, as a plain client does, and none is refused before sending.
func TestAlways503WithABudgetDownGetsThe503(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	base := newLoadBase()
	base.status.Store(http.StatusServiceUnavailable)
	var unavailable atomic.Int32
	tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{Budget: downBudget{}},
		Hooks: Hooks{EvidenceUnavailable: func(EvidenceUnavailableInfo) { unavailable.Add(1) }}})
	setRandN(tr, func(int64) int64 { return 0 }) // a throttle, were there one, would refuse whenever it may
	for i := range 200 {
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("call %d: got %v, %v; want the 503 back", i, resp, err)
		}
		clk.Advance(time.Millisecond)
	}
	if got := base.sent.Load(); got != 200 {
		t.Errorf("sent: got %d, want 200: one attempt a call, the budget refusing every retry", got)
	}
	if unavailable.Load() != 200 {
		t.Errorf("EvidenceUnavailable: got %d, want 200, one per refused retry", unavailable.Load())
	}
}
