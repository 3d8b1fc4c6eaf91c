package retryfuse

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/internal/latency"
)

// The hedge delay derived from a scope's observed latency, and the extra
// requests hedging costs a uniformly slow dependency.

func TestHedgeDelayFromObservedLatency(t *testing.T) {
	const took = 3 * time.Millisecond
	clk := newFakeClock()
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		clk.Advance(took)
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	// delays records each hedge delay asked for (the timer never fires);
	// run makes calls and returns the delays they asked for.
	type delays struct {
		mu  sync.Mutex
		all []time.Duration
	}
	install := func(tr *Transport) *delays {
		ds := &delays{}
		setClock(tr, clk.Now, func(ctx context.Context, d time.Duration) error {
			ds.mu.Lock()
			ds.all = append(ds.all, d)
			ds.mu.Unlock()
			<-ctx.Done()
			return ctx.Err()
		})
		return ds
	}
	run := func(t *testing.T, tr *Transport, ds *delays, calls int) []time.Duration {
		t.Helper()
		ds.mu.Lock()
		ds.all = nil
		ds.mu.Unlock()
		for i := range calls {
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("call %d: got %v", i, err)
			}
		}
		ds.mu.Lock()
		defer ds.mu.Unlock()
		return slices.Clone(ds.all)
	}
	// A scope's histogram of latencies (internal/latency) fed took until it
	// gives an estimate: how many observations that takes, and the estimate.
	var h latency.Histogram
	minimum := 0
	for ; minimum < 1000; minimum++ {
		if _, ok := h.Quantile(0.95); ok {
			break
		}
		h.Observe(took)
	}
	estimate, ok := h.Quantile(0.95)
	if !ok {
		t.Fatalf("a histogram of %d observations of %v gives no estimate", minimum, took)
	}

	t.Run("no HedgeDelay: no hedge until the estimate", func(t *testing.T) {
		noGoroutineLeft(t)
		tr := newTransport(t, nil, &Transport{Base: base, Hedge: HedgePolicy{Max: 1, Quantile: 0.95}, Retry: RetryPolicy{Budget: budget.Unlimited()}})
		ds := install(tr)
		delays := run(t, tr, ds, minimum)
		if len(delays) != 0 {
			t.Fatalf("hedge timers in the first %d calls: got %v, want none", minimum, delays)
		}
		delays = run(t, tr, ds, 1)
		want := estimate
		if len(delays) != 1 || delays[0] != want {
			t.Fatalf("hedge delay after %d observations of %v: got %v, want [%v]", minimum, took, delays, want)
		}
		if delays[0] < took || delays[0] > took*119/100 {
			t.Errorf("hedge delay %v: want within a quarter octave above %v", delays[0], took)
		}
	})
	t.Run("HedgeDelay until the estimate", func(t *testing.T) {
		noGoroutineLeft(t)
		tr := newTransport(t, nil, &Transport{Base: base, Hedge: HedgePolicy{Max: 1, Quantile: 0.95, Delay: 50 * time.Millisecond}, Retry: RetryPolicy{Budget: budget.Unlimited()}})
		delays := run(t, tr, install(tr), minimum+1)
		if len(delays) != minimum+1 {
			t.Fatalf("hedge timers: got %d, want %d", len(delays), minimum+1)
		}
		for i, d := range delays[:minimum] {
			if d != 50*time.Millisecond {
				t.Errorf("call %d: hedge delay %v, want HedgeDelay 50ms", i, d)
			}
		}
		if got, want := delays[minimum], estimate; got != want {
			t.Errorf("call %d: hedge delay %v, want the estimate %v", minimum, got, want)
		}
	})
}

// A uniformly slow dependency: every call's hedge timer fires before its
// answer. The extra requests are exactly the retries the budget granted,
// and within its ratio.
func TestHedgeExtraRequestsBoundedByBudget(t *testing.T) {
	noGoroutineLeft(t)
	const calls = 200
	budget, err := budget.NewRatio(budget.RatioConfig{Ratio: 0.1, MinPerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	// Each request answers once its call's hedge was sent or refused.
	var decided atomic.Pointer[chan struct{}]
	var sent atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		select {
		case <-*decided.Load():
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	var hedges, refusals int
	tr := newTransport(t, newFakeClock(), &Transport{
		Base: base,
		Hedge: HedgePolicy{
			Max:   1,
			Delay: 10 * time.Millisecond,
		},
		Retry: RetryPolicy{
			Budget: budget,
		},
		Hooks: Hooks{Policy: func(i PolicyInfo) {
			switch i.Action {
			case actionSent:
				hedges++
			case actionRefused:
				refusals++
			}
			close(*decided.Load())
		}},
	})
	for i := range calls {
		ch := make(chan struct{})
		decided.Store(&ch)
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: got %v", i, err)
		}
	}
	extra := int(sent.Load()) - calls
	if hedges+refusals != calls {
		t.Fatalf("hedges due: got %d sent and %d refused, want %d in all", hedges, refusals, calls)
	}
	if extra != hedges {
		t.Errorf("extra requests: got %d, want the %d hedges sent", extra, hedges)
	}
	if got := budget.Snapshot().Retries; got != uint64(hedges) {
		t.Errorf("retries the budget granted: got %d, want %d (one per hedge)", got, hedges)
	}
	if extra == 0 || extra > calls/10 {
		t.Errorf("extra requests: got %d, want some, and at most %d (10%% of %d calls)", extra, calls/10, calls)
	}
	t.Logf("%d calls to a uniformly slow dependency: %d hedges sent, %d refused by the budget", calls, hedges, refusals)
}
