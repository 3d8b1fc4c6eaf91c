package throttle

import (
	"testing"
	"time"
)

// StateAt reads the throttle's share and the pace as Admit and Delay
// would find them, and changes neither.

func TestStateAtReadsTheShareAdmitRefuses(t *testing.T) {
	th := New(DefaultRatio, DefaultWindow)
	clk := newFakeClockAt(fixedStart)
	if s := th.StateAt(clk.Now()); s != (State{}) {
		t.Fatalf("a throttle that heard nothing: got %+v, want the zero State", s)
	}
	quota(th, clk, seeded(1), 10, 30, 200) // three times the quota for two seconds
	s := th.StateAt(clk.Now())
	if s.Share <= 0 || s.Rejected == 0 || s.Accepted == 0 || s.Requests < s.Accepted+s.Rejected {
		t.Fatalf("throttling: got %+v, want a share refused and the window's counts", s)
	}
	// Admit refuses with the share StateAt read (the lowest draw refuses
	// whenever the share is above zero).
	if p := th.Admit(clk.Now(), lowestDraw, nil); p != s.Share {
		t.Errorf("Admit refused a share of %v, StateAt read %v", p, s.Share)
	}
	// A window later the counts are history: the share reads zero, and
	// reading it moved nothing (the throttle is still active until a call
	// comes).
	later := clk.Now().Add(2 * DefaultWindow)
	if s := th.StateAt(later); s.Share != 0 || s.Requests != 0 {
		t.Errorf("a window later: got %+v, want no share and no counts", s)
	}
	if !th.Active() {
		t.Error("StateAt marked the throttle inactive: a reader must change nothing")
	}
}

func TestStateAtReadsThePaceAndItsHold(t *testing.T) {
	th := New(DefaultRatio, DefaultWindow)
	now := fixedStart
	th.Pace().Throttled(now, time.Second, true, func() float64 { return 40 })
	s := th.StateAt(now)
	if s.Pace != 40 || !s.HeldUntil.Equal(now.Add(time.Second)) {
		t.Errorf("after a 429 with Retry-After 1s: pace %v, held until %v; want 40/s until %v", s.Pace, s.HeldUntil, now.Add(time.Second))
	}
	// Quiet for long enough: idle, as the next call would find it.
	idle := now.Add(time.Second + DefaultWindow)
	if s := th.StateAt(idle); s.Pace != 0 || !s.HeldUntil.IsZero() {
		t.Errorf("after the quiet: pace %v, held until %v; want idle", s.Pace, s.HeldUntil)
	}
	if !th.Pace().Active() {
		t.Error("StateAt marked the pace idle: a reader must change nothing")
	}
}
