package retryfuse

import (
	"context"
	"sync"
	"time"
)

// bulkhead bounds the attempts in flight to one scope, with a bounded
// first-in, first-out queue of attempts waiting for a slot. A slot freed
// while attempts wait is handed to the first of them, so that a newcomer
// never overtakes the queue.
type bulkhead struct {
	mu       sync.Mutex
	inFlight int
	limit    int
	maxQueue int
	queue    []chan struct{} // closed when the slot is handed over
}

// tryAcquire takes a slot when one is free and nobody waits for one.
func (b *bulkhead) tryAcquire() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inFlight < b.limit && len(b.queue) == 0 {
		b.inFlight++
		return true
	}
	return false
}

// free reports whether tryAcquire would take a slot now.
func (b *bulkhead) free() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight < b.limit && len(b.queue) == 0
}

// idle reports whether no attempt holds a slot or waits for one.
func (b *bulkhead) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight == 0 && len(b.queue) == 0
}

// enqueue joins the queue, when it has room, and returns the channel
// closed when a slot is handed over.
func (b *bulkhead) enqueue() (chan struct{}, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inFlight < b.limit && len(b.queue) == 0 {
		b.inFlight++
		ch := make(chan struct{})
		close(ch)
		return ch, true
	}
	if len(b.queue) >= b.maxQueue {
		return nil, false
	}
	ch := make(chan struct{})
	b.queue = append(b.queue, ch)
	return ch, true
}

// abandon leaves the queue. It reports false when the slot was handed
// over meanwhile: the caller then holds it and must release it.
func (b *bulkhead) abandon(ch chan struct{}) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, w := range b.queue {
		if w == ch {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return true
		}
	}
	return false
}

// release gives a slot back, to the first waiter if there is one.
func (b *bulkhead) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) > 0 {
		ch := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		close(ch) // the slot passes to the waiter: inFlight stays
		return
	}
	b.inFlight--
}

// acquire takes a slot, waiting in the queue for at most maxWait (timed
// on clk) and never after ctx is done. It returns how long it waited, and
// false when it got no slot.
func (b *bulkhead) acquire(ctx context.Context, clk clock, maxWait time.Duration) (time.Duration, bool) {
	if b.tryAcquire() {
		return 0, true
	}
	if maxWait < 0 || ctx.Err() != nil {
		return 0, false
	}
	ch, ok := b.enqueue()
	if !ok {
		return 0, false
	}
	began := clk.Now()
	timeout := after(clk, maxWait)
	defer timeout.stop()
	select {
	case <-ch:
		return clk.Now().Sub(began), true
	case <-timeout.C:
	case <-ctx.Done():
	}
	waited := clk.Now().Sub(began)
	if !b.abandon(ch) {
		// The slot came as the wait ended: give it on.
		b.release()
	}
	return waited, false
}

// alarm receives on C once its clock has slept a while; stop ends the
// sleep early, and no goroutine outlives it. On the real clock it is a
// time.Timer, without a goroutine in between. The zero alarm never fires.
type alarm struct {
	C      <-chan time.Time
	timer  *time.Timer        // on the real clock
	cancel context.CancelFunc // on another clock, with done
	done   chan struct{}
}

// after returns an alarm that fires once clk has slept d.
func after(clk clock, d time.Duration) alarm {
	if _, ok := clk.(realClock); ok {
		t := time.NewTimer(d)
		return alarm{C: t.C, timer: t}
	}
	ctx, cancel := context.WithCancel(context.Background())
	fired := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if clk.Sleep(ctx, d) == nil && ctx.Err() == nil {
			fired <- clk.Now()
		}
	}()
	return alarm{C: fired, cancel: cancel, done: done}
}

// stop stops the alarm; it may be called more than once.
func (a *alarm) stop() {
	switch {
	case a.timer != nil:
		a.timer.Stop()
	case a.cancel != nil:
		a.cancel()
		<-a.done
	}
}
