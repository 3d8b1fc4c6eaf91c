package throttle

import (
	"testing"
	"time"
)

// The pace learnt from 429s (pace.go), on its own: the rate set at a 429,
// the places after a Retry-After, a clock gone back.

// At a 429 the pace is set to the rate the dependency accepted lately,
// once however many 429s come back together: calls that arrive at once
// are spaced at that rate beyond a tenth of a second's burst.
func TestPaceSpacesCallsAtTheAcceptedRate(t *testing.T) {
	var p Pace
	p.quiet = 500 * time.Millisecond
	now := fixedStart
	reads := 0
	accepted := func() float64 { reads++; return 200 }
	for range 50 { // the attempts in flight at the 429 all come back 429
		p.Throttled(now, 0, false, accepted) // no Retry-After
	}
	if reads != 1 {
		t.Errorf("the rate was set %d times by 50 429s together, want once", reads)
	}
	var last time.Duration
	for i := range 60 {
		d, held, _ := p.Delay(now)
		if held {
			t.Fatalf("call %d: held, without a Retry-After", i)
		}
		last = d
	}
	// 60 places at 200/s with a burst of 20: the last 40 after the burst,
	// the 60th at 40/200 s.
	if want := 200 * time.Millisecond; last < want-5*time.Millisecond || last > want+5*time.Millisecond {
		t.Errorf("the 60th call's place: %v, want about %v", last, want)
	}
	// Quiet for half a second: idle, nothing held.
	if d, _, _ := p.Delay(now.Add(time.Second)); d != 0 {
		t.Errorf("after the quiet: held %v, want none", d)
	}
}

// The places taken during a Retry-After are spaced by the rate from its
// end, even when more 429s come back meanwhile.
func TestPacePlacesAfterRetryAfterStaySpaced(t *testing.T) {
	var p Pace
	p.quiet = 500 * time.Millisecond
	now := fixedStart
	ten := func() float64 { return 10 }
	p.Throttled(now, 2*time.Second, true, ten) // Retry-After: 2
	var places []time.Duration
	for i := range 5 {
		d, wasHeld, _ := p.Delay(now)
		if !wasHeld {
			t.Errorf("call %d: not held during the Retry-After", i)
		}
		places = append(places, d)
		now = now.Add(10 * time.Millisecond)
		p.Throttled(now, 0, false, ten) // an attempt in flight comes back 429, without a Retry-After
	}
	for i := 1; i < len(places); i++ {
		// Each place is a tenth of a second after the one before, less the
		// 10ms that passed between the two calls.
		if gap := places[i] + 10*time.Millisecond - places[i-1]; gap < 90*time.Millisecond {
			t.Errorf("places %v: call %d goes %v after call %d, want about 100ms", places, i, gap, i-1)
		}
	}
}

// A clock that went back makes the pace idle rather than hold calls for
// ever on a rate it cannot date.
func TestPaceClockGoneBack(t *testing.T) {
	var p Pace
	p.quiet = 500 * time.Millisecond
	now := fixedStart
	p.Throttled(now, 0, false, func() float64 { return 10 })
	back := now.Add(-time.Minute)
	p.Answered(back)
	for i := range 5 {
		if d, _, _ := p.Delay(back); d > time.Second {
			t.Errorf("a minute back, call %d: held %v, want no hold past a second", i, d)
		}
	}
}
