package retryfuse

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is the one virtual clock of the tests: a Transport's (see
// install), and through it its breaker's, budgets' and ledger.Memory's. It
// stands still until Sleep or Advance moves it; every delay Sleep is asked
// for is recorded. It is safe for concurrent use.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
	// onSleep, when set, runs at the start of every Sleep (to cancel a
	// context mid-wait, for instance).
	onSleep func(d time.Duration)
}

// newFakeClock returns a clock that starts at the real time, so that real
// context deadlines compare sensibly with it.
func newFakeClock() *fakeClock { return newFakeClockAt(time.Now()) }

// newFakeClockAt returns a clock that starts at start.
func newFakeClockAt(start time.Time) *fakeClock { return &fakeClock{t: start} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Sleep records d and advances the clock by it; it returns ctx.Err() at
// once, without advancing, when ctx is done.
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	hook := c.onSleep
	c.mu.Unlock()
	if hook != nil {
		hook(d)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// Sleeps returns the delays requested so far.
func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

// install makes the clock tr's.
func (c *fakeClock) install(tr *Transport) { setClock(tr, c.Now, c.Sleep) }

func TestRealClockAgreesWithTimeNow(t *testing.T) {
	var clk realClock
	for range 1000 {
		before := time.Now()
		got := clk.Now()
		after := time.Now()
		if got.Before(before) || got.After(after) {
			t.Fatalf("realClock.Now() = %v, not within [%v, %v]", got, before, after)
		}
		// The wall reading stays within the rebase interval of the wall clock's.
		if d := got.Round(0).Sub(after.Round(0)); d > clockRebase || d < -clockRebase {
			t.Fatalf("wall reading off by %v", d)
		}
	}
}

// TestBudgetOnTheTransportsClock pins that a budget of this package runs
// on the clock of the Transport it serves: its context methods, called by
// the Transport, read that clock.
func TestBudgetOnTheTransportsClock(t *testing.T) {
	ctx := context.Background()
	now := t0
	clk := funcClock{now: func() time.Time { return now }}

	bucket, err := budget.NewTokenBucket(budget.TokenBucketConfig{Capacity: 1})
	require.NoError(t, err)
	tb := budgetOn(bucket, clk)
	tb.RecordRequest(ctx)
	ok, err := tb.AllowRetry(ctx)
	assert.True(t, ok && err == nil, "first retry: got %v, %v, want true, nil", ok, err)
	ok, _ = tb.AllowRetry(ctx)
	assert.False(t, ok, "second retry at the same instant: got %v, want false", ok)
	now = now.Add(time.Second)
	ok, _ = tb.AllowRetry(ctx)
	assert.True(t, ok, "retry a second later: got %v, want true", ok)

	ratio, err := budget.NewRatio(budget.RatioConfig{Ratio: 1, MinPerSecond: -1})
	require.NoError(t, err)
	rb := budgetOn(ratio, clk)
	rb.RecordRequest(ctx)
	ok, err = rb.AllowRetry(ctx)
	assert.True(t, ok && err == nil, "retry after one request: got %v, %v, want true, nil", ok, err)
	now = now.Add(10 * time.Second)
	rb.RecordRequest(ctx)
	now = now.Add(10 * time.Second)
	ok, _ = rb.AllowRetry(ctx)
	assert.False(t, ok, "retry after the deposit expired: got %v, want false", ok)

	other := budget.Unlimited()
	assert.Equal(t, budget.Budget(other), budgetOn(other, clk), "a budget of another kind is used as it is")
}
