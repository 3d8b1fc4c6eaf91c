// Package throttle is the client-side throttle of new calls to a scope
// (Google SRE's adaptive throttling) and the pace of new calls learnt from
// the dependency's 429s, with the refusal of a throttled call. The
// Transport keeps one Throttle per scope, hands it the time, and reports
// what it decides.
package throttle

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the throttle: admission of new calls to a scope whose
// dependency has been rejecting most of what it was sent, in the manner
// of Google SRE's client-side adaptive throttling. Over the last window
// (ThrottlePolicy.Window), with C new calls (sent, or refused here), R requests
// (the attempts sent, retries and hedges included, and the calls refused
// here) and A of the attempts accepted, a new call is refused here with
// probability
//
//	p = max(0, (R − K·A) / (C + P)), at most throttleMaxShare,
//
// K being the ratio (ThrottlePolicy.Ratio, 2 by default, SRE's and grpc-go's) and P the
// padding (8, grpc-go's), so that a few calls say little. As the calls refused here count as requests, the
// attempts sent settle at about K·A: what reaches the dependency stays a
// bounded multiple of what it accepts, retries included (SRE's form, with
// R + 1 below, bounds the first attempts alone; retries would then add to
// the bound). While the dependency accepts at least 1/K of the requests,
// p is zero: a healthy dependency is never throttled, nor one that
// serves every call on its second attempt.
//
// An attempt is rejected when the dependency answered 503, or failed to
// answer (a timeout, a connection refused or lost); any other answer, 500
// included, is accepted. A 429 is neither: it says the dependency is
// serving, at a rate, and it teaches the scope's pace instead (pace.go),
// which spaces new calls rather than refusing them. Nothing is counted
// for an attempt the caller cancelled or that a local error ended.
//
// The throttle defers to a Breaker: while the scope's breaker has not
// seen the outcomes its settings ask for before it may open
// (MinObservations), the throttle refuses nothing (Admit's waive), so
// that the user's own brake is never starved of its evidence.
//
// SRE's window lets throttling linger for as long as it remembers the
// rejections. Here, once the dependency has accepted throttleFresh
// attempts in a row over a bucket's width or more, the window forgets
// what came before, so that work flows again as soon as it is accepted.
// A clock that went back by a window or more makes it forget too: it
// never refuses on evidence it cannot date.

// The throttle's defaults (ThrottlePolicy's zero fields): K, SRE's and
// grpc-go's, and the window.
const (
	DefaultRatio  = 2.0
	DefaultWindow = 2 * time.Second
)

// Buckets is the number of buckets the window is divided into: a window
// shorter than Buckets nanoseconds cannot be divided.
const Buckets = 20

// minRejects is how many rejections the window must hold before it
// throttles: a few failures among few requests do not.
const minRejects = 5

// The throttle's other constants.
const (
	// throttlePadding is P: calls counted beside the window's, so that a
	// few rejections among few calls refuse little.
	throttlePadding = 8
	// throttleMaxShare bounds p: a few calls still go, so that the
	// throttle learns when the dependency accepts again.
	throttleMaxShare = 0.9
	throttleFresh    = 3
)

// Throttle is a scope's throttle. This type is concurrency safe.
//
// Every call of a scope records its attempts here, so the path of an
// accepted attempt while nothing is rejected (the throttle inactive) is
// one atomic addition to the bucket of its time, without the lock: it
// touches two cache lines (the fields above ring, and a bucket), which
// matters more than instructions, for between two calls the memory goes
// cold. A rejection, a bucket that opens (once a twentieth of the window),
// and admission while active take the lock. An accepted attempt that races with the first rejection may
// miss the streak of accepts (it only delays forgetting by one).
type Throttle struct {
	active  atomic.Bool // the window holds rejections: Admit must look
	started atomic.Bool // origin is set
	width   time.Duration
	origin  time.Time // the time of tick 0, set once before started
	ratio   float64
	ring    [Buckets]throttleBucket

	mu      sync.Mutex
	since   time.Time // when the window last began: origin, or its last forgetting
	newest  int64     // the newest tick counted
	streak  int       // attempts accepted since the last rejected
	lastRej time.Time

	// pace is the rate learnt from 429s (pace.go), after the counts: its
	// flag is read once per call, the counts' fields by every attempt.
	pace Pace
}

// throttleBucket holds the counts of one tick of the window (a
// Buckets-th of it): calls, requests and accepts packed in
// sent (throttlePackBits each), and rejections.
type throttleBucket struct {
	tick    atomic.Int64 // the tick counted here; noTick when none
	sent    atomic.Uint64
	rejects atomic.Uint64
}

// throttlePackBits is the width of each count packed in a bucket's sent:
// over two million attempts per scope and bucket (a twentieth of the
// window), far beyond what one process sends through net/http.
const (
	throttlePackBits = 21
	throttlePackMask = 1<<throttlePackBits - 1
	noTick           = math.MinInt64
)

// throttleCounts are the counts of a window.
type throttleCounts struct {
	calls, requests, accepts, rejects uint64
}

// packed returns the counts of one attempt, packed as a bucket's sent.
func packed(first, accepted bool) uint64 {
	v := uint64(1) << throttlePackBits // a request
	if first {
		v += 1 << (2 * throttlePackBits) // a call
	}
	if accepted {
		v++
	}
	return v
}

// New returns the throttle of a scope: ratio is K, and window is divided
// into Buckets.
func New(ratio float64, window time.Duration) *Throttle {
	t := &Throttle{ratio: ratio, width: window / Buckets}
	t.pace.quiet = 2 * (window / Buckets) // see Pace: idle soon once 429s stop
	for i := range t.ring {
		t.ring[i].tick.Store(noTick)
	}
	return t
}

// tickOf is the tick of now: the number of bucket widths since origin,
// rounded down (negative before it).
func (t *Throttle) tickOf(now time.Time) int64 {
	d := now.Sub(t.origin)
	tick := int64(d / t.width)
	if d < 0 && d%t.width != 0 {
		tick--
	}
	return tick
}

// bucket returns the bucket of tick in the ring.
func (t *Throttle) bucket(tick int64) *throttleBucket {
	i := tick % Buckets
	if i < 0 {
		i += Buckets
	}
	return &t.ring[i]
}

// share is the share of new calls refused, for the window's counts w.
func (t *Throttle) share(w throttleCounts) float64 {
	if w.rejects < minRejects {
		return 0
	}
	p := (float64(w.requests) - t.ratio*float64(w.accepts)) / float64(w.calls+throttlePadding)
	return min(max(0, p), throttleMaxShare)
}

// Active reports whether the window holds rejections: while it does not,
// Admit lets every call go, and the caller need not read the clock for
// it. It costs one atomic load.
func (t *Throttle) Active() bool { return t.active.Load() }

// Pace returns the scope's pace learnt from 429s (pace.go).
func (t *Throttle) Pace() *Pace { return &t.pace }

// Admit decides whether a new call may go at now, drawing from randN, and
// counts it when it may not: it returns the share refused then, zero when
// the call may go. waive, when not nil, is asked before a refusal is
// counted: true lets the call go, uncounted (a Breaker that has not heard
// its outcomes decides). A window without rejections (see Active) lets
// every call go.
func (t *Throttle) Admit(now time.Time, randN func(int64) int64, waive func() bool) float64 {
	if !t.active.Load() {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.placeLocked(now)
	w := t.windowLocked()
	if w.rejects == 0 {
		t.active.Store(false) // the rejections have expired
		return 0
	}
	p := t.share(w)
	const scale = 1 << 53
	if p == 0 || randN(scale) >= int64(p*scale) || waive != nil && waive() {
		return 0
	}
	b.sent.Add(1<<(2*throttlePackBits) | 1<<throttlePackBits) // a call, and a request
	return p
}

// Record counts an attempt that went out and ended at now: accepted or
// rejected by the dependency; first says it was a call's first attempt.
// An accepted attempt while the window holds no rejection is counted
// without the lock.
func (t *Throttle) Record(now time.Time, first, accepted bool) {
	if accepted && !t.active.Load() && t.started.Load() {
		tick := t.tickOf(now)
		if b := t.bucket(tick); b.tick.Load() == tick {
			b.sent.Add(packed(first, true))
			return
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.placeLocked(now)
	b.sent.Add(packed(first, accepted))
	if !accepted {
		b.rejects.Add(1)
		t.streak, t.lastRej = 0, now
		t.active.Store(true)
		return
	}
	t.streak++
	if t.active.Load() && t.streak >= throttleFresh && now.Sub(t.lastRej) >= t.width {
		t.forgetLocked(now) // accepted again: the rejections are history
	}
}

// placeLocked returns the bucket of now's tick, opened for it, moving the
// window on when now is past its newest tick. A time a little before the
// newest tick (read before another goroutine's moved the window on) is
// counted in its own bucket, within the window. A clock that went back by
// a whole window or more leaves what the window holds undatable: it is
// forgotten, and so is a window that now has left behind. t.mu is held.
func (t *Throttle) placeLocked(now time.Time) *throttleBucket {
	if !t.started.Load() {
		t.origin, t.since, t.newest = now, now, 0
		t.started.Store(true)
	}
	tick := t.tickOf(now)
	switch {
	case tick > t.newest:
		if tick-t.newest >= Buckets {
			t.forgetLocked(now)
		}
		t.newest = tick
	case tick <= t.newest-Buckets:
		t.forgetLocked(now)
		t.newest = tick
	}
	b := t.bucket(tick)
	if b.tick.Load() != tick {
		// The slot held an older tick, or none: its counts are zeroed
		// before the tick is published, so that the path without the lock
		// adds only to counts of its own tick.
		b.sent.Store(0)
		b.rejects.Store(0)
		b.tick.Store(tick)
	}
	return b
}

// windowLocked sums the buckets of the window: the Buckets ticks
// up to the newest. t.mu is held.
func (t *Throttle) windowLocked() throttleCounts {
	var w throttleCounts
	for i := range t.ring {
		b := &t.ring[i]
		if tick := b.tick.Load(); tick == noTick || tick <= t.newest-Buckets || tick > t.newest {
			continue
		}
		s := b.sent.Load()
		w.calls += s >> (2 * throttlePackBits)
		w.requests += s >> throttlePackBits & throttlePackMask
		w.accepts += s & throttlePackMask
		w.rejects += b.rejects.Load()
	}
	return w
}

// AcceptedRate returns the rate of the attempts accepted over the second
// up to now (the window's last half of buckets), per second of the time
// the window has covered of it since it last began: what the dependency
// has shown it serves, where the pace is set at a 429.
func (t *Throttle) AcceptedRate(now time.Time) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.started.Load() {
		return 0
	}
	const recent = Buckets / 2
	last := t.tickOf(now)
	var accepts uint64
	for i := range t.ring {
		b := &t.ring[i]
		if tick := b.tick.Load(); tick != noTick && tick > last-recent && tick <= last && tick > t.newest-Buckets {
			accepts += b.sent.Load() & throttlePackMask
		}
	}
	span := min(now.Sub(t.since), recent*t.width)
	if span < t.width {
		span = t.width
	}
	return float64(accepts) / span.Seconds()
}

// forgetLocked empties the window at now. t.mu is held.
func (t *Throttle) forgetLocked(now time.Time) {
	t.since = now
	for i := range t.ring {
		b := &t.ring[i]
		b.tick.Store(noTick)
		b.sent.Store(0)
		b.rejects.Store(0)
	}
	t.active.Store(false)
}
