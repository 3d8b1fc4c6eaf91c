package bulkhead

import (
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
	if got := r.capAt(began.Add(time.Second)); got != NoLimit || r.on {
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
	if got := r.capAt(back.Add(time.Second)); got != NoLimit || r.on {
		t.Errorf("a window after the clock went back: cap %d, on %v; want the ramp over", got, r.on)
	}
}

func TestBulkheadRampAdmitsWaitersAsAttemptsSucceed(t *testing.T) {
	b := &Bulkhead{limit: NoLimit, maxQueue: 4}
	now := fixedStart
	if !b.StartRamp(now, 1, time.Second) {
		t.Fatal("the ramp did not start")
	}
	if b.StartRamp(now, 1, time.Second) {
		t.Error("a second ramp started over the first")
	}
	if _, ok := b.TryAcquireAt(now); !ok {
		t.Fatal("the first attempt was refused")
	}
	if _, ok := b.TryAcquireAt(now); ok {
		t.Fatal("a second attempt admitted at once: the ramp starts from one")
	}
	ch, ok := b.enqueue(now, time.Second, Narrow)
	if !ok {
		t.Fatal("no room in the queue")
	}
	// The first succeeds, a tenth of the window later: the cap is two,
	// and the waiter gets its slot.
	b.ReleaseAt(now.Add(100*time.Millisecond), true)
	select {
	case <-ch:
	default:
		t.Fatal("the waiter got no slot once an attempt succeeded and the ramp allowed two")
	}
	if allowed, limit := b.Limits(now.Add(100 * time.Millisecond)); allowed != 2 || limit != NoLimit {
		t.Errorf("limits: got %d of %d, want 2 during the ramp", allowed, limit)
	}
	b.ReleaseAt(now.Add(time.Second), true)
	if n, ok := b.TryAcquireAt(now.Add(time.Second)); !ok || n != 1 {
		t.Errorf("after the window: got %d in flight, %v; want admitted", n, ok)
	}
}

// A bulkhead without a limit counts its attempts without its lock until a
// ramp begins; the ramp then bounds them, counted either way, and once
// its window is over the bulkhead is quiet again.
func TestBulkheadWithoutALimitIsQuietOutsideItsRamp(t *testing.T) {
	b := New(NoLimit, 0)
	now := fixedStart
	for i := range 3 {
		if n, ok := b.TryAcquireAt(now); !ok || n != i+1 || !b.quiet.Load() {
			t.Fatalf("attempt %d: %d in flight, admitted %v, quiet %v; want admitted, quiet", i+1, n, ok, b.quiet.Load())
		}
	}
	if !b.StartRamp(now, 4, time.Second) || b.quiet.Load() {
		t.Fatal("the ramp did not start, or left the bulkhead quiet")
	}
	if n, ok := b.TryAcquireAt(now); !ok || n != 4 {
		t.Fatalf("the fourth attempt: %d in flight, admitted %v; want admitted with the three before it", n, ok)
	}
	if _, ok := b.TryAcquireAt(now); ok {
		t.Fatal("a fifth attempt admitted: the ramp starts from four")
	}
	b.ReleaseAt(now, false) // an attempt admitted while quiet leaves under the ramp
	end := now.Add(time.Second)
	if n, ok := b.TryAcquireAt(end); !ok || n != 4 || !b.quiet.Load() {
		t.Errorf("after the window: %d in flight, admitted %v, quiet %v; want 4, admitted, quiet", n, ok, b.quiet.Load())
	}
	for range 4 {
		b.ReleaseAt(end, true)
	}
	if !b.Idle() {
		t.Errorf("%d in flight after every attempt left", int(b.inFlight.Load()))
	}
}

// During slow start, a fixed bulkhead without a queue of its own
// (MaxQueued zero) lets the attempts its limit would have admitted wait
// for the ramp, rather than refusing them at once: a burst above the ramp
// waits its turn. Beyond the limit, the bulkhead's own queue bound holds.
func TestBulkheadRampQueuesWhatTheLimitWouldAdmit(t *testing.T) {
	b := New(8, 0)
	now := fixedStart
	if !b.StartRamp(now, 2, time.Second) {
		t.Fatal("the ramp did not start")
	}
	for range 2 {
		if _, ok := b.TryAcquireAt(now); !ok {
			t.Fatal("an attempt within the ramp was refused")
		}
	}
	for i := range 6 { // 8 - 2: what the limit would have admitted
		if _, ok := b.enqueue(now, time.Second, Narrow); !ok {
			t.Fatalf("waiter %d: refused at once, with %d of the limit of 8 unused", i+1, 8-2-i)
		}
	}
	if _, ok := b.enqueue(now, time.Second, Narrow); ok {
		t.Error("a ninth attempt joined the queue: beyond the limit, MaxQueued (zero) holds")
	}
}
