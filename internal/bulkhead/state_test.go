package bulkhead

import (
	"testing"
	"time"
)

// StateAt reads the slots, the queue and slow start's cap as admission
// would find them, and changes nothing.

func TestStateAtCountsSlotsAndQueue(t *testing.T) {
	b := New(2, 4)
	clk := newFakeClockAt(fixedStart)
	for range 2 {
		if _, ok := b.TryAcquireAt(clk.Now()); !ok {
			t.Fatal("a free slot was refused")
		}
	}
	ch, ok := b.enqueue(clk.Now(), time.Hour, Narrow) // one attempt waits for a slot
	if !ok {
		t.Fatal("the queue refused its first attempt")
	}
	got := b.StateAt(clk.Now())
	want := State{InFlight: 2, Queued: 1, Limit: 2, Allowed: 2}
	if got != want {
		t.Errorf("two in flight, one waiting: got %+v, want %+v", got, want)
	}
	if !b.abandon(ch) {
		t.Fatal("the waiting attempt was handed a slot none freed")
	}
	if got := b.StateAt(clk.Now()); got.Queued != 0 {
		t.Errorf("after the waiting attempt left: %d queued, want 0", got.Queued)
	}
}

func TestStateAtReadsSlowStartWithoutEndingIt(t *testing.T) {
	b := New(NoLimit, 0)
	now := fixedStart
	b.StartRamp(now, 2, 10*time.Second)
	if got := b.StateAt(now); !got.Ramping || got.Allowed != 2 || got.Limit != NoLimit {
		t.Errorf("at the ramp's start: got %+v, want 2 allowed of no limit, ramping", got)
	}
	over := now.Add(time.Minute)
	if got := b.StateAt(over); got.Ramping || got.Allowed != NoLimit {
		t.Errorf("past the ramp's window: got %+v, want no ramp", got)
	}
	b.mu.Lock()
	on := b.ramp.on
	b.mu.Unlock()
	if !on {
		t.Error("StateAt ended the ramp: a reader must change nothing")
	}
}
