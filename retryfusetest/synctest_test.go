package retryfusetest_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// Inside a testing/synctest bubble the Transport's waits run on the
// bubble's clock: a 30 s Retry-After and a 5 s backoff take no wall time.
// Each test reads the bubble's clock (time.Since), which moves only when
// every goroutine of the bubble waits.

// retries records the delays of a Transport's retries.
type retries struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (r *retries) hooks() retryfuse.Hooks {
	return retryfuse.Hooks{Retry: func(info retryfuse.RetryInfo) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.delays = append(r.delays, info.Delay)
	}}
}

func (r *retries) total() (sum time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.delays {
		sum += d
	}
	return sum
}

func get(t *testing.T, ctx context.Context, c *http.Client) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/items", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return resp, err
}

func TestRetryAfterOf30sAndABackoffOf5sTakeNoWallTimeInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := retryfusetest.NewTransport(nil,
			retryfusetest.RetryAfter(http.StatusTooManyRequests, 30*time.Second),
			retryfusetest.ResetBeforeRead()) // then a backoff of at most 5 s
		var log retries
		client := &http.Client{Transport: &retryfuse.Transport{Base: api, Hooks: log.hooks(),
			Retry: retryfuse.RetryPolicy{InitialBackoff: 5 * time.Second, MaxBackoff: 5 * time.Second}}}

		start := time.Now()
		resp, err := get(t, t.Context(), client)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: got %v, %v; want 200", resp, err)
		}
		elapsed := time.Since(start)
		if log.delays[0] != 30*time.Second || log.delays[1] > 5*time.Second {
			t.Errorf("retry delays: got %v, want 30s (the Retry-After) then at most 5s", log.delays)
		}
		if elapsed != log.total() {
			t.Errorf("bubble time: got %v, want the sum of the delays %v", elapsed, log.total())
		}
		t.Logf("bubble time: %v (Retry-After 30s, backoff %v)", elapsed, log.delays[1])
	})
}

func TestRetryAfterAboveTheCapIsReturnedAtOnceInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := retryfusetest.NewTransport(nil, retryfusetest.RetryAfterDate(http.StatusServiceUnavailable, 31*time.Second))
		client := &http.Client{Transport: &retryfuse.Transport{Base: api}} // MaxRetryAfter: 30s

		start := time.Now()
		resp, err := get(t, t.Context(), client)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("GET: got %v, %v; want the 503", resp, err)
		}
		if elapsed := time.Since(start); elapsed != 0 {
			t.Errorf("bubble time: got %v, want 0 (no wait above the cap)", elapsed)
		}
		if got := api.Requests(); got != 1 {
			t.Errorf("requests: got %d, want 1", got)
		}
	})
}

func TestDeadlineEndsACallAfterARetryAfterInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := retryfusetest.NewTransport(nil,
			retryfusetest.RetryAfter(http.StatusTooManyRequests, 30*time.Second),
			retryfusetest.StallBeforeApply())
		client := &http.Client{Transport: &retryfuse.Transport{Base: api}}
		ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
		defer cancel()

		start := time.Now()
		_, err := get(t, ctx, client)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("GET: got %v, want the deadline's error", err)
		}
		if elapsed := time.Since(start); elapsed != 40*time.Second {
			t.Errorf("bubble time: got %v, want the deadline's 40s", elapsed)
		}
		if got := api.Requests(); got != 2 {
			t.Errorf("requests: got %d, want 2", got)
		}
	})
}

func TestRetryAfterLongerThanTheDeadlineIsNotWaitedInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := retryfusetest.NewTransport(nil, retryfusetest.RetryAfter(http.StatusTooManyRequests, 30*time.Second))
		client := &http.Client{Transport: &retryfuse.Transport{Base: api}}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()

		start := time.Now()
		resp, err := get(t, ctx, client)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("GET: got %v, %v; want the 429 at once", resp, err)
		}
		if elapsed := time.Since(start); elapsed != 0 {
			t.Errorf("bubble time: got %v, want 0", elapsed)
		}
	})
}

func TestAttemptTimeoutOfAStalledWriteStrikesInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		charges := retryfusetest.NewRecorder()
		api := retryfusetest.NewTransport(charges.Wrap(nil), retryfusetest.ApplyThenStall())
		client := &http.Client{Transport: &retryfuse.Transport{Base: api,
			Retry: retryfuse.RetryPolicy{AttemptTimeout: 10 * time.Second}}}

		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://api.test/charges", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k1")
		start := time.Now()
		_, err := client.Do(req)
		var rec *retryfuse.ReconcileRequiredError
		if !errors.As(err, &rec) || !errors.Is(err, retryfuse.ErrAttemptTimeout) {
			t.Fatalf("POST: got %v, want a reconcile error caused by the attempt timeout", err)
		}
		if elapsed := time.Since(start); elapsed != 10*time.Second {
			t.Errorf("bubble time: got %v, want the attempt timeout's 10s", elapsed)
		}
		charges.ExactlyOnce(t, "k1")
	})
}

func TestBreakerOpenIntervalPassesInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := breaker.New(breaker.Settings{FailureThreshold: 2, OpenTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		api := retryfusetest.NewTransport(nil, retryfusetest.ResetBeforeRead(), retryfusetest.ResetBeforeRead())
		client := &http.Client{Transport: &retryfuse.Transport{Base: api,
			Retry: retryfuse.RetryPolicy{MaxAttempts: 1}, Brake: retryfuse.BrakePolicy{Breaker: b}}}

		for range 2 {
			if _, err := get(t, t.Context(), client); err == nil {
				t.Fatal("GET: got no error, want the reset")
			}
		}
		if _, err := get(t, t.Context(), client); !errors.Is(err, retryfuse.ErrCircuitOpen) {
			t.Fatalf("GET while open: got %v, want ErrCircuitOpen", err)
		}
		time.Sleep(time.Minute) // the bubble's minute: the open interval passes
		if _, err := get(t, t.Context(), client); err != nil {
			t.Errorf("GET after the open interval: got %v, want the probe's 200", err)
		}
		if got := api.Requests(); got != 3 {
			t.Errorf("requests: got %d, want 3 (none while open)", got)
		}
	})
}

func TestLedgerMemoryTTLPassesInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		charges := retryfusetest.NewRecorder()
		api := retryfusetest.NewTransport(charges.Wrap(nil), retryfusetest.ApplyThenReset())
		client := &http.Client{Transport: &retryfuse.Transport{Base: api,
			Keys: retryfuse.KeyPolicy{Ledger: &ledger.Memory{TTL: time.Hour}}}}
		post := func() error {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://api.test/charges", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", "k2")
			resp, err := client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		}

		if err := post(); !errors.Is(err, retryfuse.ErrReconcileRequired) {
			t.Fatalf("first POST: got %v, want ErrReconcileRequired", err)
		}
		if err := post(); !errors.Is(err, retryfuse.ErrReconcileRequired) {
			t.Fatalf("POST under the uncertain key: got %v, want ErrReconcileRequired (nothing sent)", err)
		}
		time.Sleep(time.Hour) // the bubble's hour: the ledger lets the key go
		if err := post(); err != nil {
			t.Fatalf("POST after the TTL: got %v, want it sent and answered", err)
		}
		if got := charges.Applied("k2"); got != 2 {
			t.Errorf("applied under k2: got %d, want 2 (once before the TTL, once after)", got)
		}
	})
}
