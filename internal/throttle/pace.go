package throttle

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// This file is the pace of new calls: a send rate per scope, learnt from
// the dependency's 429s, that spaces new calls out rather than refusing
// them. A 429 says the dependency serves, at a rate; sent faster, the
// excess is answered 429 and sent again, so a client that keeps to the
// rate sends each call about once.
//
// At a 429 the rate is set to what the dependency accepted over the last
// second (the throttle's counts, AcceptedRate: a direct reading of its quota), at most
// once per paceCutEvery however many 429s the attempts then in flight
// bring back; from there it grows by paceGrowth of itself a second, up to
// twice, probing for more, until the next 429. A 429's Retry-After (one
// up to MaxRetryAfter; a longer one is not waited for, as a retry does
// not wait for it) holds new calls until it has passed, and the places
// after it are spaced by the rate. The bucket is
// golang.org/x/time/rate's, with a burst of a tenth of a second's worth
// (at least one call).
//
// The pace is idle until a 429 (admission then costs one atomic load)
// and falls idle again once no 429 has come, and no Retry-After held, for
// two of the throttle's buckets (a tenth of its window: 200 ms by default),
// twice the spacing of its cuts (paceCutEvery); a clock
// that went back by more than that makes it idle too: a call of a client whose
// load has fallen is never held for a rate it learnt under load, and a
// client still above the quota meets a 429 soon and paces again.

// The constants of the pace.
const (
	paceMinRate  = 0.5  // calls per second
	paceGrowth   = 0.25 // of the rate set at the last 429, per second
	paceCutEvery = 100 * time.Millisecond
)

// Pace is a scope's learnt send rate, made with its Throttle (New). The
// zero value is an idle pace, which holds no call. This type is
// concurrency safe.
type Pace struct {
	active atomic.Bool // a 429 came lately: admission must look

	mu        sync.Mutex
	lim       *rate.Limiter // made at the first 429
	base      float64       // the rate set at the last cut
	lastCut   time.Time
	lastRej   time.Time     // the last 429
	holdUntil time.Time     // a 429's Retry-After
	quiet     time.Duration // idle after this without a 429
}

// Active reports whether a 429 came lately: while it has not, Delay holds
// no call, and the caller need not read the clock for it. It costs one
// atomic load.
func (p *Pace) Active() bool { return p.active.Load() }

// Delay reserves the next new call's place at now and returns how long it
// must wait for it, whether that wait is a 429's Retry-After (held), and
// cancel to give the place back should the call not wait. Zero when the
// pace is idle.
func (p *Pace) Delay(now time.Time) (d time.Duration, held bool, cancel func()) {
	if !p.active.Load() {
		return 0, false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	last := p.lastRej
	if p.holdUntil.After(last) {
		last = p.holdUntil
	}
	if now.Sub(last) >= p.quiet || p.lastRej.Sub(now) > p.quiet {
		p.active.Store(false) // no 429 for long enough, or a clock gone back
		return 0, false, nil
	}
	from := now
	if p.holdUntil.After(now) {
		from, held = p.holdUntil, true
	}
	r := p.lim.ReserveN(from, 1)
	if d = r.DelayFrom(now); d == 0 {
		return 0, false, nil
	}
	return d, held, func() { r.CancelAt(now) }
}

// Throttled hears an attempt answered 429 at now. hold says that its
// Retry-After, retryAfter, is to hold new calls (the caller holds none
// past its bound, MaxRetryAfter). accepted is the rate the dependency
// accepted lately (AcceptedRate), read at a cut.
func (p *Pace) Throttled(now time.Time, retryAfter time.Duration, hold bool, accepted func() float64) {
	p.record(now, true, retryAfter, hold, accepted)
}

// Answered hears an attempt that ended at now otherwise than with a 429.
// An idle pace costs one atomic load.
func (p *Pace) Answered(now time.Time) {
	if !p.active.Load() {
		return
	}
	p.record(now, false, 0, false, nil)
}

// record hears an attempt that ended at now: whether it was answered 429
// (throttled), with its Retry-After to hold (see Throttled).
func (p *Pace) record(now time.Time, throttled bool, retryAfter time.Duration, hold bool, accepted func() float64) {
	if !throttled && !p.active.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	active := p.active.Load()
	switch {
	case !throttled && !active:
		return // fell idle meanwhile
	case throttled:
		p.lastRej = now
		if hold && now.Add(retryAfter).After(p.holdUntil) {
			p.holdUntil = now.Add(retryAfter)
		}
		if !active || now.Sub(p.lastCut) >= paceCutEvery {
			p.base, p.lastCut = max(paceMinRate, accepted()), now
		}
		p.active.Store(true)
	}
	r := p.base * min(2, 1+paceGrowth*max(0, now.Sub(p.lastCut).Seconds()))
	if p.lim == nil {
		p.lim = rate.NewLimiter(rate.Limit(r), max(1, int(r/10)))
		return
	}
	// The places reserved during a Retry-After begin where it ends: the
	// limiter is moved there, never back before it.
	at := now
	if p.holdUntil.After(at) {
		at = p.holdUntil
	}
	p.lim.SetLimitAt(at, rate.Limit(r))
	p.lim.SetBurstAt(at, max(1, int(r/10)))
}
