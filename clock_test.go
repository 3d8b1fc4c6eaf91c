package retryfuse

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is the one virtual clock of the tests: a Transport's (see
// install), and through it its breaker's, budgets' and MemoryLedger's. It
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
