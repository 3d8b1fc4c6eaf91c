package retryfuseredis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// TestRatioLeaseSteps walks one process's lease by hand (syncs run by the
// test, both clocks fixed): credit for a quiet process, a lease sized to
// the retries asked for, refusal when it is spent, and the unused lease
// given back half-way to its expiry, for another process to lease.
func TestRatioLeaseSteps(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	cfg := budget.RatioConfig{Ratio: 1, MinPerSecond: -1, Window: 10 * time.Second}
	opts := BudgetOptions{Prefix: prefix, Timeout: testTimeout, SyncInterval: time.Second, MaxLease: 8}
	b, err := newRatioBudget(c, "lease", cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newRatioBudget(c, "lease", cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	local := newTestClock()
	b.s.now = local.now
	server := newTestClock()
	b.s.kind.(*ratioKind).now = server.now
	other.s.kind.(*ratioKind).now = server.now
	sync := func() {
		t.Helper()
		if err := b.s.sync(bg(), false); err != nil {
			t.Fatal(err)
		}
	}
	allow := func(want bool, why string) {
		t.Helper()
		if got := mustAllow(t, b); got != want {
			t.Fatalf("%s: got %v, want %v", why, got, want)
		}
	}

	for range 6 {
		b.RecordRequest(bg())
	}
	sync() // deposits 6
	allow(true, "first retry of a quiet process: on credit")
	allow(false, "second retry at once: no lease yet")
	sync() // charges the credit (5 left); two asks in one interval: a lease of 4
	if got := b.s.heldNow(); got != 4 {
		t.Fatalf("lease: got %d, want 4 (two asks, for two intervals)", got)
	}
	for i := range 4 {
		allow(true, "spending the lease "+string(rune('1'+i)))
	}
	allow(false, "lease spent")
	sync() // five asks: wants 8, gets the 1 left
	if got := b.s.heldNow(); got != 1 {
		t.Fatalf("second lease: got %d, want 1 (all that is left)", got)
	}
	if leased, _, _ := other.s.kind.sync(bg(), c, other.Key(), 0, 0, 0, 0, 8); leased != 0 {
		t.Fatalf("another process: leased %d, want 0 while the last retry is held", leased)
	}
	local.add(4 * time.Second) // half-way to the lease's expiry (8s)
	server.add(4 * time.Second)
	sync() // gives the held retry back
	if got := b.s.heldNow(); got != 0 {
		t.Fatalf("after half the lease's life: holds %d, want 0", got)
	}
	if leased, _, _ := other.s.kind.sync(bg(), c, other.Key(), 0, 0, 0, 0, 8); leased != 1 {
		t.Fatalf("another process after the give-back: leased %d, want 1", leased)
	}
	local.add(4 * time.Second)
	allow(false, "not quiet (asked 8s ago, window 10s), nothing held")
	local.add(10 * time.Second)
	allow(true, "quiet again after a window without asking: on credit")
}

// TestLeaseExpires: a lease not given back (its process could not sync) is
// not spent past 0.8·Window, when its retries may leave the window.
func TestLeaseExpires(t *testing.T) {
	c := sharedClient(t)
	b, err := newRatioBudget(c, "expiry", budget.RatioConfig{Ratio: 1, MinPerSecond: -1, Window: 10 * time.Second}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	local := newTestClock()
	b.s.now = local.now
	for range 10 {
		b.RecordRequest(bg())
	}
	b.s.asks = 4
	if err := b.s.sync(bg(), false); err != nil {
		t.Fatal(err)
	}
	if b.s.heldNow() == 0 {
		t.Fatal("no lease")
	}
	mustAllow(t, b) // not quiet from now on
	local.add(8 * time.Second)
	if mustAllow(t, b) {
		t.Fatal("lease 8s old in a 10s window: got a retry, want none")
	}
}

// TestCloseFlushes: Close deposits what was recorded since the last sync.
func TestCloseFlushes(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	cfg := budget.RatioConfig{Ratio: 1, MinPerSecond: -1}
	b, err := NewRatioBudget(c, "close", cfg, BudgetOptions{Prefix: prefix, Timeout: testTimeout, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		b.RecordRequest(bg())
	}
	if err := b.Close(bg()); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(bg()); err != nil {
		t.Fatalf("second Close: %v, want nil", err)
	}
	other, err := newRatioBudget(c, "close", cfg, BudgetOptions{Prefix: prefix, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if leased, _, err := other.s.kind.sync(bg(), c, other.Key(), 0, 0, 0, 0, 100); err != nil || leased != 5 {
		t.Fatalf("after Close: leased (%d, %v), want 5: the five requests deposited", leased, err)
	}
}

// TestBudgetsClose: Budgets.Close closes every budget New made (goleak
// checks their goroutines are gone), and New fails afterwards.
func TestBudgetsClose(t *testing.T) {
	f, err := TokenBuckets(sharedClient(t), budget.TokenBucketConfig{}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"a", "b", "c"} {
		if _, err := f.New(scope); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(bg()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := f.New("d"); err == nil {
		t.Fatal("New after Close: got a budget, want an error")
	}
}

// TestCloseWithAnEndedContextBlamesTheContext: a budget's Close given a
// context that had already ended, with requests to deposit, sends
// nothing, stops the sync goroutine (goleak checks it), and says the
// caller's context ended, not that Redis is down. A budget with nothing to
// send closes without an error whatever its context.
func TestCloseWithAnEndedContextBlamesTheContext(t *testing.T) {
	c := sharedClient(t)
	prefix := uniq(t)
	cfg := budget.RatioConfig{Ratio: 1, MinPerSecond: -1}
	b, err := NewRatioBudget(c, "ended", cfg, BudgetOptions{Prefix: prefix, Timeout: testTimeout, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		b.RecordRequest(bg())
	}
	ctx, cancel := context.WithCancel(bg())
	cancel()
	err = b.Close(ctx)
	if !errors.Is(err, ErrContextEnded) || !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Close with an ended context: %v, want ErrContextEnded and context.Canceled, not ErrUnavailable", err)
	}
	if want := `retryfuseredis: budget "` + b.Key() + `" closed without its last sync: the caller's context ended (context canceled)`; err.Error() != want {
		t.Errorf("Close's error reads\n%q, want\n%q", err, want)
	}
	other, err := newRatioBudget(c, "ended", cfg, BudgetOptions{Prefix: prefix, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if leased, _, err := other.s.kind.sync(bg(), c, other.Key(), 0, 0, 0, 0, 100); err != nil || leased != 0 {
		t.Fatalf("after Close with an ended context: leased (%d, %v), want 0: nothing deposited", leased, err)
	}

	f, err := RatioBudgets(c, cfg, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	busy, err := f.New("busy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.New("idle"); err != nil {
		t.Fatal(err)
	}
	busy.RecordRequest(bg())
	err = f.Close(ctx)
	if !errors.Is(err, ErrContextEnded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Budgets.Close with an ended context: %v, want ErrContextEnded, not ErrUnavailable", err)
	}
	if n := strings.Count(err.Error(), "closed without its last sync"); n != 1 {
		t.Errorf("Budgets.Close: %v: %d budgets reported, want 1 (the idle one had nothing to send)", err, n)
	}

	idle, err := NewRatioBudget(c, "idle", cfg, BudgetOptions{Prefix: prefix, Timeout: testTimeout, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Close(ctx); err != nil {
		t.Fatalf("Close of a budget with nothing to send, with an ended context: %v, want nil", err)
	}
}
