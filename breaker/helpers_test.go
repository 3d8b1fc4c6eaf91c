package breaker

import (
	"errors"
	"time"

	"github.com/retryfuse/retryfuse/internal/testclock"
)

// fixedStart is the fixed start of the tests' clocks.
var fixedStart = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is the tests' virtual clock.
type fakeClock = testclock.Clock

func newFakeClockAt(start time.Time) *fakeClock { return testclock.At(start) }

func newFakeClock() *fakeClock { return newFakeClockAt(fixedStart) }

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
