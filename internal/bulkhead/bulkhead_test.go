package bulkhead

import (
	"context"
	"testing"
	"time"
)

// The bulkhead's queue (bulkhead.go): its bound under a learnt limit, and
// the bound of a wait in it.

func TestBulkheadLearntLimitRefusesAStandingQueue(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	b := &Bulkhead{limit: 4, maxQueue: -1} // a quarter of the limit: one waits
	for range 4 {
		b.TryAcquireAt(clk.Now())
	}
	ch, ok := b.enqueue(clk.Now(), 10*time.Millisecond, Narrow)
	if !ok {
		t.Fatal("the first waiter found no room")
	}
	if _, ok := b.enqueue(clk.Now(), 10*time.Millisecond, Narrow); ok {
		t.Error("a second waiter joined a queue of one for a limit of 4")
	}
	// A slot frees: the waiter gets it, and the queue is empty again.
	b.ReleaseAt(clk.Now(), true)
	<-ch
	b = &Bulkhead{limit: 40, maxQueue: -1} // room for ten
	for range 40 {
		b.TryAcquireAt(clk.Now())
	}
	ch, ok = b.enqueue(clk.Now(), 10*time.Millisecond, Narrow)
	if !ok {
		t.Fatal("a waiter found no room in an empty queue")
	}
	clk.Advance(20 * time.Millisecond)
	if _, ok := b.enqueue(clk.Now(), 10*time.Millisecond, Narrow); ok {
		t.Error("a waiter joined a queue that has not been empty for twice the wait: it stands")
	}
	if !b.abandon(ch) {
		t.Fatal("the first waiter had a slot")
	}
	if _, ok := b.enqueue(clk.Now(), 10*time.Millisecond, Narrow); !ok {
		t.Error("a waiter found no room in a queue that has just emptied")
	}
}

func TestBulkheadWaitNeverExceedsItsBound(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	b := &Bulkhead{limit: 1, maxQueue: 1}
	b.TryAcquireAt(clk.Now())
	waited, _, ok := b.Acquire(context.Background(), clk, 30*time.Millisecond, Narrow)
	if ok || waited != 30*time.Millisecond {
		t.Errorf("acquire: waited %v, got a slot %v; want 30ms and none", waited, ok)
	}
	if _, _, ok := b.Acquire(context.Background(), clk, 0, Narrow); ok {
		t.Error("acquire without a wait: got a slot from a full bulkhead")
	}
}
