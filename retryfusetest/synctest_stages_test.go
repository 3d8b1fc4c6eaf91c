package retryfusetest_test

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// The stages that run goroutines of their own (a hedged attempt's branch,
// a shared read's call) and timers (the hedge's delay) run in a bubble
// too, and leave nothing behind when the bubble ends.

func TestHedgeDelayPassesInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := retryfusetest.NewTransport(nil, retryfusetest.StallBeforeApply()) // the hedge answers
		client := &http.Client{Transport: &retryfuse.Transport{Base: api,
			Hedge: retryfuse.HedgePolicy{Max: 1, Delay: 2 * time.Second}}}

		start := time.Now()
		resp, err := get(t, t.Context(), client)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: got %v, %v; want the hedge's 200", resp, err)
		}
		if elapsed := time.Since(start); elapsed != 2*time.Second {
			t.Errorf("bubble time: got %v, want the hedge delay's 2s", elapsed)
		}
		if got := api.Requests(); got != 2 {
			t.Errorf("requests: got %d, want 2 (the stalled one and its hedge)", got)
		}
	})
}

func TestSharedReadsShareOneSlowCallInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		items := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "abc") })
		api := retryfusetest.NewTransport(items, retryfusetest.SlowBody(time.Second))
		client := &http.Client{Transport: &retryfuse.Transport{Base: api, Reads: retryfuse.ReadPolicy{Share: true}}}

		var wg sync.WaitGroup
		bodies := make([]string, 2)
		for i := range bodies {
			wg.Go(func() {
				resp, err := client.Get("http://api.test/items")
				if err != nil {
					t.Errorf("GET %d: %v", i, err)
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				bodies[i] = string(b)
			})
			synctest.Wait() // the first is in flight before the second comes
		}
		wg.Wait()
		if bodies[0] != "abc" || bodies[1] != "abc" {
			t.Errorf("bodies: got %q, want abc twice", bodies)
		}
		if got := api.Requests(); got != 1 {
			t.Errorf("requests: got %d, want 1 shared", got)
		}
	})
}

func TestBulkheadQueueWaitsOnTheBubblesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := retryfusetest.NewTransport(nil, retryfusetest.StallBeforeApply())
		client := &http.Client{Transport: &retryfuse.Transport{Base: api,
			Retry: retryfuse.RetryPolicy{MaxAttempts: 1, AttemptTimeout: 3 * time.Second},
			Load:  retryfuse.LoadPolicy{MaxInFlight: 1, MaxQueued: 1, MaxWait: 10 * time.Second}}}

		start := time.Now()
		var wg sync.WaitGroup
		ended := make([]time.Duration, 2)
		for i := range ended {
			wg.Go(func() {
				resp, err := client.Get("http://api.test/items")
				if err == nil {
					_ = resp.Body.Close()
				}
				ended[i] = time.Since(start)
			})
			synctest.Wait() // the first holds the slot before the second comes
		}
		wg.Wait()
		// The first stalls until its attempt timeout; the second waits in
		// the queue for the slot, then is answered.
		if ended[0] != 3*time.Second || ended[1] != 3*time.Second {
			t.Errorf("calls ended at %v of the bubble's time, want both at 3s", ended)
		}
		if got := api.Requests(); got != 2 {
			t.Errorf("requests: got %d, want 2", got)
		}
	})
}
