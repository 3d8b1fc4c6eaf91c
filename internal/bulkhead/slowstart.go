package bulkhead

import (
	"math"
	"time"
)

// This file is slow start: after a scope's breaker closes, and when its
// learnt limit rises from its floor, the attempts admitted at once ramp
// up over the SlowStart window instead of all the waiting work going at
// once. Elapsed time is permission to probe; passing probes are
// permission to ramp: the ramp admits the lower of
//
//   - from·2^(10·elapsed/SlowStart): doubling every tenth of the window,
//     so that by its end a thousand times as many are admitted (the ramp
//     then ends, and the limit alone applies); and
//   - from + the attempts that succeeded since it began: each success
//     admits one more, as an acknowledgement widens TCP's window, so that
//     a dependency that answers slowly or not at all is not ramped on
//     time alone.
//
// The ramp lives in the scope's Bulkhead (bulkhead.go), under its lock,
// and bounds its limit (MaxInFlight, the learnt limit, or none).

// ramp is a scope's slow start; the zero ramp is off.
type ramp struct {
	on     bool
	began  time.Time
	from   int // admitted at once when it began
	acks   int // attempts that succeeded since
	window time.Duration
}

// rampDoublings is how many times the ramp doubles over its window.
const rampDoublings = 10

// capAt returns the attempts the ramp admits at once at now, and turns it
// off once its window is over. A clock that went back by more than the
// window restarts it: a ramp never holds longer than its window of the
// clock as it now reads. (A time read just before another goroutine's
// began the ramp is at its start.)
func (r *ramp) capAt(now time.Time) int {
	el := now.Sub(r.began)
	switch {
	case el < -r.window:
		r.began, el = now, 0
	case el < 0:
		el = 0
	}
	if el >= r.window {
		r.on = false
		return NoLimit
	}
	byTime := float64(r.from) * math.Exp2(rampDoublings*float64(el)/float64(r.window))
	return min(int(byTime), r.from+r.acks)
}

// StartRamp begins slow start at now from the attempts from, over window.
// It reports false, and changes nothing, when a ramp is already on: a
// second reason to ramp does not restart it.
func (b *Bulkhead) StartRamp(now time.Time, from int, window time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ramp.on {
		return false
	}
	b.ramp = ramp{on: true, began: now, from: max(1, from), window: window}
	b.quiet.Store(false) // counts without the lock before this stay counted
	return true
}
