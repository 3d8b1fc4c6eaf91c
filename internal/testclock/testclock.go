// Package testclock is the virtual clock of the tests of retryfuse's
// packages: it stands still until Advance or Sleep moves it, so that a
// test of a five-minute schedule runs in a microsecond. Only tests import
// it.
package testclock

import (
	"context"
	"sync"
	"time"
)

// Clock is a virtual clock. This type is concurrency safe.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// At returns a Clock that reads start until it is moved.
func At(start time.Time) *Clock { return &Clock{t: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Sleep moves the clock on by d at once; it returns ctx.Err(), without
// moving the clock, when ctx is done.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}
