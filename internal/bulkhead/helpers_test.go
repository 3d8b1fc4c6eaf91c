package bulkhead

import (
	"context"
	"sync"
	"time"
)

// fixedStart is the fixed start of the tests' clocks.
var fixedStart = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

// fakeClock is a virtual clock: it stands still until Sleep or Advance
// moves it. It is safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

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

// Sleep advances the clock by d; it returns ctx.Err() at once, without
// advancing, when ctx is done.
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}
