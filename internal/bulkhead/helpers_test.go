package bulkhead

import (
	"time"

	"github.com/retryfuse/retryfuse/internal/testclock"
)

// fixedStart is the fixed start of the tests' clocks.
var fixedStart = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

// fakeClock is the tests' virtual clock.
type fakeClock = testclock.Clock

func newFakeClockAt(start time.Time) *fakeClock { return testclock.At(start) }
