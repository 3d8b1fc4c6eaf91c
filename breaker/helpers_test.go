package breaker

import (
	"errors"
	"sync"
	"time"
)

// fixedStart is the fixed start of the tests' clocks.
var fixedStart = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClockAt(start time.Time) *fakeClock { return &fakeClock{t: start} }

func newFakeClock() *fakeClock { return newFakeClockAt(fixedStart) }

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

// errBudget stands for a retry budget's refusal: a local gate's, no
// evidence about the dependency.
var errBudget = errors.New("retry budget exhausted")

// settings returns the breaker's settings in force, defaults resolved.
func (b *Breaker) settings() Settings {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initLocked()
	return b.set
}
