package retryfuse

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
)

// Slow start beside a fixed bulkhead without a queue (MaxInFlight, no
// MaxQueued) queues a healthy burst within its limit while admission
// ramps up from the breaker's one probe, rather than refusing it: 8
// callers at once under a limit of 10, each with a deadline of 1s, are
// all served.
func TestSlowStartBesideAFixedBulkheadQueuesABurstWithinItsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &healthyBase{latency: 10 * time.Millisecond, failFirst: 1}
		brk, err := breaker.New(breaker.Settings{FailureThreshold: 1, OpenTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		tr := &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1}, Brake: BrakePolicy{Breaker: brk},
			Load: LoadPolicy{MaxInFlight: 10, SlowStart: time.Second}}
		burst(t, tr, 1, time.Second) // the 503 that opens the scope
		time.Sleep(time.Second)
		if errs, codes := burst(t, tr, 1, time.Second); errs[0] != nil || codes[0] != http.StatusOK {
			t.Fatalf("the probe: got %d, %v; want 200, closing the breaker", codes[0], errs[0])
		}
		errs, codes := burst(t, tr, 8, time.Second)
		for i := range errs {
			if errs[i] != nil || codes[i] != http.StatusOK {
				t.Errorf("caller %d: got %d, %v; want 200", i, codes[i], errs[i])
			}
		}
	})
}
