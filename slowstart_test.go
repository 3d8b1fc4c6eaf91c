package retryfuse

import (
	"context"
	"testing"
	"time"
)

// Slow start (slowstart.go): the ramp's cap on its own, and in the
// bulkhead.

func TestRampDoublesEveryTenthOfItsWindowWhileAttemptsSucceed(t *testing.T) {
	began := fixedStart
	r := ramp{on: true, began: began, from: 2, acks: 1000, window: time.Second}
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{{0, 2}, {50 * time.Millisecond, 2}, {100 * time.Millisecond, 4}, {200 * time.Millisecond, 8}, {500 * time.Millisecond, 64}} {
		if got := r.capAt(began.Add(tc.at)); got != tc.want {
			t.Errorf("cap at +%v: got %d, want %d", tc.at, got, tc.want)
		}
	}
	if got := r.capAt(began.Add(time.Second)); got != noLimit || r.on {
		t.Errorf("at the end of the window: cap %d, on %v; want no cap, and the ramp over", got, r.on)
	}
}

func TestRampGrowsNoFasterThanAttemptsSucceed(t *testing.T) {
	r := ramp{on: true, began: fixedStart, from: 2, window: time.Second}
	if got := r.capAt(fixedStart.Add(500 * time.Millisecond)); got != 2 {
		t.Errorf("cap after half the window without a success: got %d, want 2: elapsed time alone does not ramp", got)
	}
	r.acks = 5
	if got := r.capAt(fixedStart.Add(500 * time.Millisecond)); got != 7 {
		t.Errorf("cap after 5 successes: got %d, want 7: one more for each", got)
	}
}

func TestRampRestartsWhenTheClockGoesBack(t *testing.T) {
	r := ramp{on: true, began: fixedStart, from: 2, acks: 1000, window: time.Second}
	back := fixedStart.Add(-time.Hour)
	if got := r.capAt(back); got != 2 {
		t.Errorf("cap after the clock went back: got %d, want the start, 2", got)
	}
	// It ends a window after that, not an hour and a window later.
	if got := r.capAt(back.Add(time.Second)); got != noLimit || r.on {
		t.Errorf("a window after the clock went back: cap %d, on %v; want the ramp over", got, r.on)
	}
}

func TestBulkheadRampAdmitsWaitersAsAttemptsSucceed(t *testing.T) {
	b := &bulkhead{limit: noLimit, maxQueue: 4}
	now := fixedStart
	if !b.startRamp(now, 1, time.Second) {
		t.Fatal("the ramp did not start")
	}
	if b.startRamp(now, 1, time.Second) {
		t.Error("a second ramp started over the first")
	}
	if _, ok := b.tryAcquireAt(now); !ok {
		t.Fatal("the first attempt was refused")
	}
	if _, ok := b.tryAcquireAt(now); ok {
		t.Fatal("a second attempt admitted at once: the ramp starts from one")
	}
	ch, ok := b.enqueue(now, time.Second, false)
	if !ok {
		t.Fatal("no room in the queue")
	}
	// The first succeeds, a tenth of the window later: the cap is two,
	// and the waiter gets its slot.
	b.releaseAt(now.Add(100*time.Millisecond), true)
	select {
	case <-ch:
	default:
		t.Fatal("the waiter got no slot once an attempt succeeded and the ramp allowed two")
	}
	if allowed, limit := b.limits(now.Add(100 * time.Millisecond)); allowed != 2 || limit != noLimit {
		t.Errorf("limits: got %d of %d, want 2 during the ramp", allowed, limit)
	}
	b.releaseAt(now.Add(time.Second), true)
	if n, ok := b.tryAcquireAt(now.Add(time.Second)); !ok || n != 1 {
		t.Errorf("after the window: got %d in flight, %v; want admitted", n, ok)
	}
}

// A bulkhead without a limit counts its attempts without its lock until a
// ramp begins; the ramp then bounds them, counted either way, and once
// its window is over the bulkhead is quiet again.
func TestBulkheadWithoutALimitIsQuietOutsideItsRamp(t *testing.T) {
	b := newBulkhead(noLimit, 0)
	now := fixedStart
	for i := range 3 {
		if n, ok := b.tryAcquireAt(now); !ok || n != i+1 || !b.quiet.Load() {
			t.Fatalf("attempt %d: %d in flight, admitted %v, quiet %v; want admitted, quiet", i+1, n, ok, b.quiet.Load())
		}
	}
	if !b.startRamp(now, 4, time.Second) || b.quiet.Load() {
		t.Fatal("the ramp did not start, or left the bulkhead quiet")
	}
	if n, ok := b.tryAcquireAt(now); !ok || n != 4 {
		t.Fatalf("the fourth attempt: %d in flight, admitted %v; want admitted with the three before it", n, ok)
	}
	if _, ok := b.tryAcquireAt(now); ok {
		t.Fatal("a fifth attempt admitted: the ramp starts from four")
	}
	b.releaseAt(now, false) // an attempt admitted while quiet leaves under the ramp
	end := now.Add(time.Second)
	if n, ok := b.tryAcquireAt(end); !ok || n != 4 || !b.quiet.Load() {
		t.Errorf("after the window: %d in flight, admitted %v, quiet %v; want 4, admitted, quiet", n, ok, b.quiet.Load())
	}
	for range 4 {
		b.releaseAt(end, true)
	}
	if !b.idle() {
		t.Errorf("%d in flight after every attempt left", b.inFlightNow())
	}
}

func TestBulkheadLearntLimitRefusesAStandingQueue(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	b := &bulkhead{limit: 4, maxQueue: -1} // a quarter of the limit: one waits
	for range 4 {
		b.tryAcquireAt(clk.Now())
	}
	ch, ok := b.enqueue(clk.Now(), 10*time.Millisecond, false)
	if !ok {
		t.Fatal("the first waiter found no room")
	}
	if _, ok := b.enqueue(clk.Now(), 10*time.Millisecond, false); ok {
		t.Error("a second waiter joined a queue of one for a limit of 4")
	}
	// A slot frees: the waiter gets it, and the queue is empty again.
	b.releaseAt(clk.Now(), true)
	<-ch
	b = &bulkhead{limit: 40, maxQueue: -1} // room for ten
	for range 40 {
		b.tryAcquireAt(clk.Now())
	}
	ch, ok = b.enqueue(clk.Now(), 10*time.Millisecond, false)
	if !ok {
		t.Fatal("a waiter found no room in an empty queue")
	}
	clk.Advance(20 * time.Millisecond)
	if _, ok := b.enqueue(clk.Now(), 10*time.Millisecond, false); ok {
		t.Error("a waiter joined a queue that has not been empty for twice the wait: it stands")
	}
	if !b.abandon(ch) {
		t.Fatal("the first waiter had a slot")
	}
	if _, ok := b.enqueue(clk.Now(), 10*time.Millisecond, false); !ok {
		t.Error("a waiter found no room in a queue that has just emptied")
	}
}

func TestBulkheadWaitNeverExceedsItsBound(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	b := &bulkhead{limit: 1, maxQueue: 1}
	b.tryAcquireAt(clk.Now())
	waited, _, ok := b.acquire(context.Background(), clk, 30*time.Millisecond, false)
	if ok || waited != 30*time.Millisecond {
		t.Errorf("acquire: waited %v, got a slot %v; want 30ms and none", waited, ok)
	}
	if _, _, ok := b.acquire(context.Background(), clk, 0, false); ok {
		t.Error("acquire without a wait: got a slot from a full bulkhead")
	}
}
