package retryfuseredis

import (
	"errors"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// The budgets' fail-safes, and keys of one kind read as another.

// TestBudgetFailSafes: once a sync has failed, AllowRetry answers from the
// fail-safe, and reports the failure on its first call only.
func TestBudgetFailSafes(t *testing.T) {
	c := deadClient(t)
	cfg := budget.TokenBucketConfig{Capacity: 2, Refill: 1, Interval: time.Hour}
	cases := []struct {
		mode FailSafe
		want []bool
	}{
		{FailSafeLocal, []bool{true, true, false}}, // a local bucket of two tokens
		{FailSafeRefuse, []bool{false, false, false}},
		{FailSafeAllow, []bool{true, true, true}},
	}
	for _, tc := range cases {
		t.Run(tc.mode.String(), func(t *testing.T) {
			b, err := newTokenBucket(c, "down", cfg, BudgetOptions{FailSafe: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			b.s.asks = 1 // a retry was asked for: the sync leases
			if err := b.s.sync(bg(), false); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("sync with Redis down: got %v, want an error wrapping ErrUnavailable", err)
			}
			for i, want := range tc.want {
				ok, err := b.AllowRetry(bg())
				if i == 0 && !errors.Is(err, ErrUnavailable) {
					t.Fatalf("call %d: err %v, want one wrapping ErrUnavailable", i, err)
				}
				if i > 0 && err != nil {
					t.Fatalf("call %d: err %v, want nil: the failure is reported once", i, err)
				}
				if ok != want {
					t.Fatalf("call %d: ok %v, want %v", i, ok, want)
				}
			}
		})
	}
}

func TestRatioFailSafeLocalCountsRequests(t *testing.T) {
	b, err := newRatioBudget(deadClient(t), "down", budget.RatioConfig{Ratio: 0.5, MinPerSecond: -1}, BudgetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.RecordRequest(bg())
	b.RecordRequest(bg())
	if err := b.s.sync(bg(), false); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("sync with Redis down: got %v, want an error wrapping ErrUnavailable", err)
	}
	for i, want := range []bool{true, false} {
		ok, _ := b.AllowRetry(bg())
		if ok != want {
			t.Fatalf("retry %d: got %v, want %v: two local requests at ratio 0.5 make one retry", i, ok, want)
		}
	}
}

// TestBudgetKindsDoNotMix: a token bucket and a ratio budget given the
// same key report it, rather than read each other's state.
func TestBudgetKindsDoNotMix(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	tb, err := newTokenBucket(c, "same", budget.TokenBucketConfig{}, BudgetOptions{Prefix: prefix, Timeout: testTimeout, FailSafe: FailSafeRefuse})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := newRatioBudget(c, "same", budget.RatioConfig{}, BudgetOptions{Prefix: prefix, Timeout: testTimeout, FailSafe: FailSafeRefuse})
	if err != nil {
		t.Fatal(err)
	}
	leaseOne(t, tb.s)
	if _, _, err := rb.s.kind.sync(bg(), c, rb.Key(), 0, 0, 0, 0, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ratio budget on a token bucket's key: got %v, want an error wrapping ErrUnavailable", err)
	}
	c.Del(bg(), tb.Key())
	deposit(t, rb.s)
	if _, _, err := tb.s.kind.sync(bg(), c, tb.Key(), 0, 0, 0, 0, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("token bucket on a ratio budget's key: got %v, want an error wrapping ErrUnavailable", err)
	}
}
