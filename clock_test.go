package retryfuse

import (
	"context"
	"slices"
	"sync"
	"time"
)

// fakeClock is a virtual clock for the Transport's now and sleep seams. It
// starts at the real time, so that real context deadlines compare sensibly
// with it, and advances only when sleep is called. Every requested delay is
// recorded. It is safe for concurrent use.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
	// onSleep, when set, runs at the start of every sleep (to cancel a
	// context mid-wait, for instance).
	onSleep func(d time.Duration)
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
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
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	return nil
}

// Sleeps returns the delays requested so far.
func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

// install sets the clock as tr's now and sleep seams.
func (c *fakeClock) install(tr *Transport) {
	tr.now = c.Now
	tr.sleep = c.Sleep
}
