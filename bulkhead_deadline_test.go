package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
)

// pathLatencyBase answers 503 to its first failFirst requests and 200 to
// the rest, after latency, or after slow for the path /slow.
type pathLatencyBase struct {
	latency, slow time.Duration
	failFirst     int64
	received      atomic.Int64
}

func (b *pathLatencyBase) RoundTrip(req *http.Request) (*http.Response, error) {
	code := http.StatusOK
	if b.received.Add(1) <= b.failFirst {
		code = http.StatusServiceUnavailable
	}
	d := b.latency
	if req.URL.Path == "/slow" {
		d = b.slow
	}
	select {
	case <-time.After(d):
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// getWithin sends a GET of path through tr with a deadline of deadline
// from now, and returns its status or its error.
func getWithin(tr *Transport, path string, deadline time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://dep.test"+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// queuedBehindSlow sends a /slow call that takes the scope's only slot,
// then a call with a deadline of 1s, which meets the queue, and returns
// the second call's error; the first must be served.
func queuedBehindSlow(t *testing.T, tr *Transport) error {
	t.Helper()
	slow := make(chan error, 1)
	go func() {
		code, err := getWithin(tr, "/slow", time.Minute)
		if err == nil && code != http.StatusOK {
			err = errors.New(http.StatusText(code))
		}
		slow <- err
	}()
	synctest.Wait() // the slow call holds the slot
	code, err := getWithin(tr, "/", time.Second)
	if err == nil {
		t.Errorf("the queued call: got %d, want an error", code)
	}
	if err := <-slow; err != nil {
		t.Errorf("the slow call: %v", err)
	}
	return err
}

// A fixed bulkhead's queue wait leaves the caller half of what is left of
// its deadline, as a learnt limit's does before its latency is known: a
// caller with 1s left behind a slot held for 10s is refused with a
// *BulkheadFullError after queueing 500ms, not kept until its deadline
// ends in context.DeadlineExceeded, though MaxWait is longer.
func TestFixedBulkheadQueueWaitLeavesHalfTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &pathLatencyBase{latency: 10 * time.Millisecond, slow: 10 * time.Second}
		tr := &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1},
			Load: LoadPolicy{MaxInFlight: 1, MaxQueued: 1, MaxWait: time.Minute}}
		err := queuedBehindSlow(t, tr)
		var full *BulkheadFullError
		if !errors.As(err, &full) {
			t.Fatalf("the queued call: got %v, want a *BulkheadFullError", err)
		}
		if full.QueueWait != 500*time.Millisecond || full.SlowStart || full.Learnt {
			t.Errorf("the refusal: got %+v, want a fixed bulkhead's after queueing 500ms", full)
		}
		if n := base.received.Load(); n != 1 {
			t.Errorf("requests sent: got %d, want 1 (the refused call sends nothing)", n)
		}
	})
}

// Slow start's queue (a Breaker's, without MaxInFlight) follows the same
// rule: a caller with 1s left, behind the one attempt the ramp admits, is
// refused with a *BulkheadFullError (SlowStart) after queueing 500ms.
func TestSlowStartQueueWaitLeavesHalfTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &pathLatencyBase{latency: 10 * time.Millisecond, slow: 10 * time.Second, failFirst: 1}
		brk, err := breaker.New(breaker.Settings{FailureThreshold: 1, OpenTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		tr := &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1}, Brake: BrakePolicy{Breaker: brk},
			Load: LoadPolicy{SlowStart: 100 * time.Second, MaxWait: time.Minute}}
		if code, err := getWithin(tr, "/", time.Second); err != nil || code != http.StatusServiceUnavailable {
			t.Fatalf("the first call: got %d, %v; want the 503 that opens the scope", code, err)
		}
		time.Sleep(time.Second)
		if code, err := getWithin(tr, "/", time.Second); err != nil || code != http.StatusOK {
			t.Fatalf("the probe: got %d, %v; want 200, closing the breaker", code, err)
		}
		err = queuedBehindSlow(t, tr)
		var full *BulkheadFullError
		if !errors.As(err, &full) {
			t.Fatalf("the queued call: got %v, want a *BulkheadFullError", err)
		}
		if full.QueueWait != 500*time.Millisecond || !full.SlowStart {
			t.Errorf("the refusal: got %+v, want slow start's after queueing 500ms", full)
		}
	})
}
