package retryfusetest_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// TestRetryAfterIsHonouredCappedAndCancelled is the test a user copies: a
// 30-second Retry-After waited out, one above the cap not waited, and a
// wait cut short by the caller, all in the bubble's time.
func TestRetryAfterIsHonouredCappedAndCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		get := func(ctx context.Context, faults ...retryfusetest.Fault) (status int, took time.Duration, err error) {
			client := &http.Client{Transport: &retryfuse.Transport{Base: retryfusetest.NewTransport(nil, faults...)}}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/items", nil)
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				return 0, time.Since(start), err
			}
			_ = resp.Body.Close()
			return resp.StatusCode, time.Since(start), nil
		}

		// Honoured: the retry goes 30 s later, and is answered.
		if status, took, err := get(t.Context(), retryfusetest.RetryAfter(429, 30*time.Second)); status != 200 || took != 30*time.Second {
			t.Errorf("honoured: got %d after %v (%v), want 200 after 30s", status, took, err)
		}
		// Capped: above MaxRetryAfter (30 s by default) the 503 comes back at once.
		if status, took, err := get(t.Context(), retryfusetest.RetryAfter(503, 31*time.Second)); status != 503 || took != 0 {
			t.Errorf("capped: got %d after %v (%v), want 503 at once", status, took, err)
		}
		// Cancelled: the caller gives up 10 s into the wait, and the call ends then.
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(10*time.Second, cancel)
		if _, took, err := get(ctx, retryfusetest.RetryAfter(429, 30*time.Second)); !errors.Is(err, context.Canceled) || took != 10*time.Second {
			t.Errorf("cancelled: got %v after %v, want context.Canceled after 10s", err, took)
		}
	})
}
