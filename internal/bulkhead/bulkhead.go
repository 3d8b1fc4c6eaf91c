// Package bulkhead bounds the attempts in flight to one scope: the
// bulkhead's slots and queue (bulkhead.go), the limit a scope learns
// (LoadPolicy.Adaptive: adaptive.go) and slow start within it (slowstart.go).
// The Transport keeps one Bulkhead per scope, hands it the time, and
// reports what it decides.
package bulkhead

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/internal/alarm"
)

// Bulkhead bounds the attempts in flight to one scope, with a bounded
// first-in, first-out queue of attempts waiting for a slot. A slot freed
// while attempts wait is handed to the first of them, so that a newcomer
// never overtakes the queue.
//
// Its limit is MaxInFlight, or the limit a scope learns (adaptive.go),
// which moves; during slow start (a ramp, below) fewer are admitted. When
// the limit rises, waiting attempts are let in at once; when it falls,
// the attempts in flight finish, and no slot is handed over until they
// are below it.
//
// A bulkhead without a limit (a Breaker's, for its slow start alone) is
// quiet while no ramp is on: it only counts the attempts in flight, and
// does so without its lock, for every attempt of every call passes it.
//
// This type is concurrency safe.
type Bulkhead struct {
	quiet    atomic.Bool  // no limit, no ramp, no queue: acquire and release only count
	inFlight atomic.Int64 // changed under mu, or without it while quiet
	mu       sync.Mutex
	limit    int             // MaxInFlight, the learnt limit, or NoLimit
	maxQueue int             // negative: a quarter of the limit may wait (four times it when wide), and no standing queue
	queue    []chan struct{} // closed when the slot is handed over
	drained  time.Time       // when the queue was last empty
	ramp     ramp
}

// NoLimit is the limit of a bulkhead that bounds attempts only during
// slow start.
const NoLimit = math.MaxInt32

// New returns a bulkhead of limit, with at most maxQueue waiting
// (negative: a quarter of a learnt limit, see queueBoundLocked); one of
// NoLimit starts quiet.
func New(limit, maxQueue int) *Bulkhead {
	b := &Bulkhead{limit: limit, maxQueue: maxQueue}
	b.quiet.Store(limit == NoLimit)
	return b
}

// quietenLocked makes the bulkhead quiet again once it has no limit, no
// ramp and no queue. b.mu is held.
func (b *Bulkhead) quietenLocked() {
	if b.limit == NoLimit && !b.ramp.on && len(b.queue) == 0 {
		b.quiet.Store(true)
	}
}

// allowedLocked is the number of attempts admitted at once at now: the
// limit, or less during slow start. b.mu is held.
func (b *Bulkhead) allowedLocked(now time.Time) int {
	if !b.ramp.on {
		return b.limit
	}
	c := b.ramp.capAt(now)
	if !b.ramp.on { // its window is over
		b.quietenLocked()
	}
	return min(b.limit, c)
}

// Room is how many attempts a learnt limit's queue takes (see
// queueBoundLocked).
type Room int

const (
	Narrow Room = iota // a quarter of the limit
	Wide               // four times the limit: it doubles
	Cold               // eight times the limit: nothing is known of the scope yet
)

// queueBoundLocked is the number of attempts that may wait. With a learnt
// limit (maxQueue negative), a quarter of it; Wide, while it doubles (at
// the start, when the first attempts also dial), four times as many as it
// admits, so that a burst meets a queue and not a refusal while the limit
// rises to it; Cold, before any latency of the scope is known, eight
// times: a cold limit has no evidence against a burst, which waits in the
// queue (each attempt for at most its wait) while the limit doubles to it
// (32 callers at the first limit of 4, within three doublings), and a
// larger crowd at the start of an overload is refused at once rather than
// kept waiting. A fixed limit's queue (maxQueue) takes too, during slow
// start, the attempts the limit would admit but the ramp does not yet: a
// burst above the ramp waits its turn rather than being refused. b.mu is
// held.
func (b *Bulkhead) queueBoundLocked(now time.Time, room Room) int {
	switch {
	case b.maxQueue >= 0:
		return b.maxQueue + max(0, b.limit-b.allowedLocked(now))
	case room == Cold:
		return 8 * max(1, b.limit)
	case room == Wide:
		return 4 * max(1, b.limit)
	}
	return max(1, b.limit/4)
}

// TryAcquireAt takes a slot at now when one is free and nobody waits for
// one, and returns the attempts then in flight, its own included.
func (b *Bulkhead) TryAcquireAt(now time.Time) (int, bool) {
	if b.quiet.Load() {
		return int(b.inFlight.Add(1)), true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if int(b.inFlight.Load()) < b.allowedLocked(now) && len(b.queue) == 0 {
		return int(b.inFlight.Add(1)), true
	}
	return 0, false
}

// Free reports whether TryAcquireAt would take a slot at now.
func (b *Bulkhead) Free(now time.Time) bool {
	if b.quiet.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return int(b.inFlight.Load()) < b.allowedLocked(now) && len(b.queue) == 0
}

// Limits returns the number of attempts admitted at once at now, and the
// limit (more during slow start).
func (b *Bulkhead) Limits(now time.Time) (allowed, limit int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.allowedLocked(now), b.limit
}

// Idle reports whether no attempt holds a slot or waits for one.
func (b *Bulkhead) Idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight.Load() == 0 && len(b.queue) == 0
}

// enqueue joins the queue, when it has room, and returns the channel
// closed when a slot is handed over. With a learnt limit, the queue also
// refuses while it stands (unless Wide or Cold): when it has not been empty for
// standing, the attempts in it are not a burst that the slots will absorb,
// and a wait would only add to every attempt's latency (CoDel's rule).
func (b *Bulkhead) enqueue(now time.Time, standing time.Duration, room Room) (chan struct{}, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if int(b.inFlight.Load()) < b.allowedLocked(now) && len(b.queue) == 0 {
		b.inFlight.Add(1)
		ch := make(chan struct{})
		close(ch)
		return ch, true
	}
	if len(b.queue) >= b.queueBoundLocked(now, room) {
		return nil, false
	}
	switch {
	case len(b.queue) == 0:
		b.drained = now
	case b.maxQueue < 0 && room == Narrow && now.Sub(b.drained) > standing:
		return nil, false
	}
	ch := make(chan struct{})
	b.queue = append(b.queue, ch)
	return ch, true
}

// abandon leaves the queue. It reports false when the slot was handed
// over meanwhile: the caller then holds it and must release it.
func (b *Bulkhead) abandon(ch chan struct{}) bool {
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

// ReleaseAt gives a slot back at now, and lets in the waiting attempts
// the limit admits. acked says that the attempt succeeded: during slow
// start, each success admits one attempt more.
func (b *Bulkhead) ReleaseAt(now time.Time, acked bool) {
	if b.quiet.Load() {
		b.inFlight.Add(-1)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight.Add(-1)
	if acked && b.ramp.on {
		b.ramp.acks++
	}
	b.admitLocked(now)
}

// SetLimit sets the limit to n and lets in the waiting attempts it
// admits at now.
func (b *Bulkhead) SetLimit(n int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.limit = n
	b.admitLocked(now)
}

// admitLocked hands slots to the first waiters while the limit admits
// them. b.mu is held.
func (b *Bulkhead) admitLocked(now time.Time) {
	allowed := b.allowedLocked(now)
	for len(b.queue) > 0 && int(b.inFlight.Load()) < allowed {
		ch := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.inFlight.Add(1)
		close(ch) // the slot passes to the waiter
	}
	b.quietenLocked()
}

// Acquire takes a slot, waiting in the queue (room, see
// queueBoundLocked) for at most maxWait (timed on clk) and never after ctx
// is done. It returns how long it waited, the
// attempts in flight once it took its slot, and false when it got none.
func (b *Bulkhead) Acquire(ctx context.Context, clk alarm.Clock, maxWait time.Duration, room Room) (time.Duration, int, bool) {
	now := clk.Now()
	if n, ok := b.TryAcquireAt(now); ok {
		return 0, n, true
	}
	if maxWait <= 0 || ctx.Err() != nil {
		return 0, 0, false
	}
	ch, ok := b.enqueue(now, maxWait, room)
	if !ok {
		return 0, 0, false
	}
	timeout := alarm.After(clk, maxWait)
	defer timeout.Stop()
	select {
	case <-ch:
		return clk.Now().Sub(now), int(b.inFlight.Load()), true
	case <-timeout.C:
	case <-ctx.Done():
	}
	end := clk.Now()
	waited := end.Sub(now)
	b.mu.Lock()
	b.admitLocked(end) // slow start's ramp may have grown during the wait
	b.mu.Unlock()
	if !b.abandon(ch) {
		if ctx.Err() == nil {
			return waited, int(b.inFlight.Load()), true // the slot came as the wait ended
		}
		b.ReleaseAt(end, false) // the caller is gone: give it on
	}
	return waited, 0, false
}
