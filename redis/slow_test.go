package retryfuseredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// TestSlowRedisIsBounded pauses Redis (SIGSTOP: connections accepted,
// nothing answered) and checks that a call gives up by its timeout or the
// caller's deadline, whichever is sooner, not by go-redis's own
// three-second read timeout: a budget's sync (which no call waits for)
// and the ledger's Begin.
func TestSlowRedisIsBounded(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s.Addr())
	if err := c.Ping(bg()).Err(); err != nil { // a connection in the pool, so the pause meets a read
		t.Fatal(err)
	}
	short, err := newTokenBucket(c, "slow", budget.TokenBucketConfig{}, BudgetOptions{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	long, err := newRatioBudget(c, "slow", budget.RatioConfig{}, BudgetOptions{Timeout: time.Minute, FailSafe: FailSafeRefuse})
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := NewLedger(c, LedgerConfig{Timeout: 100 * time.Millisecond, AllowWithoutPersistence: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close(bg()) // after Resume: flushes the cancelled claim of the Begin below
	s.Pause()
	defer s.Resume()

	const bound = time.Second // well above the 100ms asked, well below go-redis's 3s
	check := func(name string, f func() error) {
		t.Helper()
		start := time.Now()
		err := f()
		if d := time.Since(start); d > bound {
			t.Errorf("%s took %v with Redis paused, want under %v", name, d, bound)
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: got %v, want an error wrapping ErrUnavailable", name, err)
		}
	}
	short.s.asks = 1 // a retry was asked for: the sync leases
	check("budget sync (Timeout 100ms)", func() error { return short.s.sync(bg(), false) })
	long.RecordRequest(bg())
	check("budget sync (Timeout 1m, caller's deadline 100ms)", func() error {
		ctx, cancel := context.WithTimeout(bg(), 100*time.Millisecond)
		defer cancel()
		return long.s.sync(ctx, false)
	})
	check("Begin (Timeout 100ms)", func() error {
		_, err := ledger.Begin(bg(), "k", fpA)
		return err
	})
}
