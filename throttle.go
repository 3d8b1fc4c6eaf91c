package retryfuse

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the throttle: admission of new calls to a scope whose
// dependency has been rejecting most of what it was sent, in the manner
// of Google SRE's client-side adaptive throttling. Over the last
// ThrottleWindow, with C new calls (sent, or refused here), R requests
// (the attempts sent, retries and hedges included, and the calls refused
// here) and A of the attempts accepted, a new call is refused here with
// probability
//
//	p = max(0, (R − K·A) / (C + 1)), at most throttleMaxShare,
//
// K being ThrottleRatio. As the calls refused here count as requests, the
// attempts sent settle at about K·A: what reaches the dependency stays a
// bounded multiple of what it accepts, retries included (SRE's form, with
// R + 1 below, bounds the first attempts alone; retries would then add to
// the bound). While the dependency accepts at least 1/K of the requests,
// p is zero: a healthy dependency is never throttled.
//
// An attempt is rejected when the dependency answered 429 or 503, or
// failed to answer (a timeout, a connection refused or lost); any other
// answer, 500 included, is accepted. Nothing is counted for an attempt
// the caller cancelled or that a local error ended.
//
// SRE's window lets throttling linger for as long as it remembers the
// rejections. Here, once the dependency has accepted throttleFresh
// attempts in a row over a bucket's width or more, the window forgets
// what came before, so that work flows again as soon as it is accepted.
// A clock that went back by a window or more makes it forget too: it
// never refuses on evidence it cannot date.

// The throttle's constants.
const (
	defaultThrottleRatio  = 1.4
	defaultThrottleWindow = 2 * time.Second
	throttleBuckets       = 20
	// throttleMaxShare bounds p: a few calls still go, so that the
	// throttle learns when the dependency accepts again.
	throttleMaxShare = 0.9
	// throttleMinRejects is how many rejections the window must hold
	// before it throttles: a few failures among few requests do not.
	throttleMinRejects = 5
	throttleFresh      = 3
)

// throttle is a scope's throttle. Its methods are safe for concurrent
// use.
type throttle struct {
	active atomic.Bool // the window holds rejections: admit must look
	mu     sync.Mutex
	ratio  float64
	width  time.Duration // of one bucket
	// The ring of buckets, as RatioBudget's: see its advance.
	started bool
	origin  time.Time
	head    int64
	next    time.Time
	ring    [throttleBuckets]throttleCounts
	win     throttleCounts // the sum of the ring
	streak  int            // attempts accepted since the last rejected
	lastRej time.Time
}

// throttleCounts are the counts of one bucket, or of the window.
type throttleCounts struct {
	calls, requests, accepts, rejects uint32
}

func (a *throttleCounts) add(b throttleCounts) {
	a.calls += b.calls
	a.requests += b.requests
	a.accepts += b.accepts
	a.rejects += b.rejects
}

func (a *throttleCounts) sub(b throttleCounts) {
	a.calls -= b.calls
	a.requests -= b.requests
	a.accepts -= b.accepts
	a.rejects -= b.rejects
}

func newThrottle(ratio float64, window time.Duration) *throttle {
	return &throttle{ratio: ratio, width: window / throttleBuckets}
}

// share is the share of new calls refused now. t.mu is held.
func (t *throttle) share() float64 {
	w := &t.win
	if w.rejects < throttleMinRejects {
		return 0
	}
	p := (float64(w.requests) - t.ratio*float64(w.accepts)) / float64(w.calls+1)
	return min(max(0, p), throttleMaxShare)
}

// admit decides whether a new call may go now (on clk), drawing from
// randN, and counts it when it may not: it returns the share refused
// then, zero when the call may go. A window without rejections costs one
// atomic load.
func (t *throttle) admit(clk clock, randN func(int64) int64) float64 {
	if !t.active.Load() {
		return 0
	}
	now := clk.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	p := t.share()
	const scale = 1 << 53
	if p == 0 || randN(scale) >= int64(p*scale) {
		return 0
	}
	t.count(throttleCounts{calls: 1, requests: 1})
	return p
}

// record counts an attempt that went out and ended at now: accepted or
// rejected by the dependency; first says it was a call's first attempt.
func (t *throttle) record(now time.Time, first, accepted bool) {
	c := throttleCounts{requests: 1}
	if first {
		c.calls = 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now)
	if !accepted {
		c.rejects = 1
		t.count(c)
		t.streak, t.lastRej = 0, now
		t.active.Store(true)
		return
	}
	c.accepts = 1
	t.count(c)
	t.streak++
	if t.win.rejects > 0 && t.streak >= throttleFresh && now.Sub(t.lastRej) >= t.width {
		t.forget() // accepted again: the rejections are history
	}
}

// count adds c to the newest bucket. t.mu is held.
func (t *throttle) count(c throttleCounts) {
	t.ring[t.head%throttleBuckets].add(c)
	t.win.add(c)
}

// forget empties the window. t.mu is held.
func (t *throttle) forget() {
	t.ring = [throttleBuckets]throttleCounts{}
	t.win = throttleCounts{}
	t.active.Store(false)
}

// advance empties the buckets whose time has passed. t.mu is held.
func (t *throttle) advance(now time.Time) {
	if !t.started {
		t.started, t.origin, t.next = true, now, now.Add(t.width)
		return
	}
	if now.Before(t.next) {
		// Counted in the newest bucket: a time read just before another
		// goroutine's moved the window on is no older than that. A clock
		// that went back by a whole window or more leaves what the window
		// holds undatable: it is forgotten.
		if now.Before(t.next.Add(-(throttleBuckets + 1) * t.width)) {
			t.forget()
			t.origin, t.head, t.next = now, 0, now.Add(t.width)
		}
		return
	}
	tick := int64(now.Sub(t.origin) / t.width)
	if tick <= t.head {
		return
	}
	if tick-t.head >= throttleBuckets {
		t.forget()
	} else {
		for k := t.head + 1; k <= tick; k++ {
			b := &t.ring[k%throttleBuckets]
			t.win.sub(*b)
			*b = throttleCounts{}
		}
		if t.win.rejects == 0 {
			t.active.Store(false)
		}
	}
	t.head = tick
	t.next = t.origin.Add(time.Duration(tick) * t.width).Add(t.width)
}

// errThrottled is matched by the error of a call that the throttle of its
// scope refused before anything was sent (see Transport.ThrottleRatio).
// It matches ErrDeclined.
var errThrottled = declined("retryfuse: throttled")

// throttledError is the error of a throttled call: errThrottled, with its
// scope and the share of new calls the throttle refused then.
type throttledError struct {
	scope string
	share float64
}

func (e *throttledError) Error() string {
	return "retryfuse: throttled: " + e.scope + " has rejected most recent requests; " +
		strconv.Itoa(int(e.share*100+0.5)) + "% of new calls are refused before they are sent"
}

func (e *throttledError) Unwrap() error { return errThrottled }
