package retryfuseredis

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
)

func TestOptionsValidated(t *testing.T) {
	good := newClient(t, "127.0.0.1:1")
	noCtx := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = noCtx.Close() })
	var nilClient *redis.Client
	ringNoCtx := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ringNoCtx.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ring.Close() })

	cases := map[string]func() error{
		"nil client": func() error {
			_, err := NewTokenBucket(nil, "n", budget.TokenBucketConfig{}, BudgetOptions{})
			return err
		},
		"typed nil client": func() error {
			_, err := NewRatioBudget(nilClient, "n", budget.RatioConfig{}, BudgetOptions{})
			return err
		},
		"client without ContextTimeoutEnabled": func() error {
			_, err := NewRatioBudget(noCtx, "n", budget.RatioConfig{}, BudgetOptions{})
			return err
		},
		"empty name": func() error {
			_, err := NewTokenBucket(good, "", budget.TokenBucketConfig{}, BudgetOptions{})
			return err
		},
		"negative timeout": func() error {
			_, err := NewTokenBucket(good, "n", budget.TokenBucketConfig{}, BudgetOptions{Timeout: -1})
			return err
		},
		"unknown fail-safe": func() error {
			_, err := NewTokenBucket(good, "n", budget.TokenBucketConfig{}, BudgetOptions{FailSafe: 9})
			return err
		},
		"capacity below 1": func() error {
			_, err := NewTokenBucket(good, "n", budget.TokenBucketConfig{Capacity: 0.5}, BudgetOptions{})
			return err
		},
		"negative ratio": func() error {
			_, err := NewRatioBudget(good, "n", budget.RatioConfig{Ratio: -1}, BudgetOptions{})
			return err
		},
		"window below 10µs": func() error {
			_, err := NewRatioBudget(good, "n", budget.RatioConfig{Window: 5 * time.Microsecond}, BudgetOptions{})
			return err
		},
		"budgets func with a bad config": func() error {
			_, err := RatioBudgets(good, budget.RatioConfig{Window: -1}, BudgetOptions{})
			return err
		},
		"token buckets func without ContextTimeoutEnabled": func() error {
			_, err := TokenBuckets(noCtx, budget.TokenBucketConfig{}, BudgetOptions{})
			return err
		},
		"ring without ContextTimeoutEnabled": func() error {
			_, err := NewTokenBucket(ringNoCtx, "n", budget.TokenBucketConfig{}, BudgetOptions{})
			return err
		},
		"ledger on a ring without ContextTimeoutEnabled": func() error {
			_, err := NewLedger(ringNoCtx, LedgerConfig{})
			return err
		},
		"ledger nil client":           func() error { _, err := NewLedger(nil, LedgerConfig{}); return err },
		"ledger negative TTL":         func() error { _, err := NewLedger(good, LedgerConfig{TTL: -1}); return err },
		"ledger negative InFlightTTL": func() error { _, err := NewLedger(good, LedgerConfig{InFlightTTL: -1}); return err },
		"ledger negative MaxStoredBody": func() error {
			_, err := NewLedger(good, LedgerConfig{MaxStoredBody: -1})
			return err
		},
		"ledger negative timeout": func() error { _, err := NewLedger(good, LedgerConfig{Timeout: -time.Second}); return err },
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, retryfuse.ErrInvalidPolicy) {
			t.Errorf("%s: got %v, want an error wrapping ErrInvalidPolicy", name, err)
		}
	}
	// NewLedger talks to Redis, which is not there: any error but an
	// invalid policy says the config and the client were accepted.
	if _, err := NewLedger(good, LedgerConfig{}); errors.Is(err, retryfuse.ErrInvalidPolicy) {
		t.Errorf("zero LedgerConfig: got %v, want it valid", err)
	}
	if b, err := NewRatioBudget(good, "n", budget.RatioConfig{}, BudgetOptions{}); err != nil {
		t.Errorf("zero RatioBudgetConfig and BudgetOptions: got %v, want them valid", err)
	} else {
		_ = b.Close(bg())
	}
	if _, err := NewLedger(ring, LedgerConfig{}); errors.Is(err, retryfuse.ErrInvalidPolicy) {
		t.Errorf("ring with ContextTimeoutEnabled: got %v, want it valid", err)
	}
}

// TestCeilMillis pins the rounding of expiries to milliseconds, up to the
// largest Duration: a huge TTL must not wrap round to a tiny one.
func TestCeilMillis(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1},
		{time.Microsecond, 1},
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{24 * time.Hour, 86_400_000},
		{math.MaxInt64 - 999_999, math.MaxInt64 / 1_000_000},
		{math.MaxInt64, math.MaxInt64/1_000_000 + 1},
	} {
		if got := ceilMillis(tc.d); got != tc.want {
			t.Errorf("ceilMillis(%d): got %d, want %d", tc.d, got, tc.want)
		}
	}
}
