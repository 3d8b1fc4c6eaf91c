package retryfuse

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/internal/backoff"
	"golang.org/x/time/rate"
)

// This file is the pace of new calls: a send rate per scope, learnt from
// the dependency's 429s, that spaces new calls out rather than refusing
// them. A 429 says the dependency serves, at a rate; sent faster, the
// excess is answered 429 and sent again, so a client that keeps to the
// rate sends each call about once.
//
// At a 429 the rate is set to what the dependency accepted over the last
// second (the throttle's counts: a direct reading of its quota), at most
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
// a quarter of the throttle's window (half a second by default); a clock
// that went back by more than that makes it idle too: a call of a client whose
// load has fallen is never held for a rate it learnt under load, and a
// client still above the quota meets a 429 soon and paces again.

// The constants of the pace.
const (
	paceMinRate  = 0.5  // calls per second
	paceGrowth   = 0.25 // of the rate set at the last 429, per second
	paceCutEvery = 100 * time.Millisecond
)

// pace is a scope's learnt send rate. Its methods are safe for concurrent
// use. The zero value is an idle pace.
type pace struct {
	active atomic.Bool // a 429 came lately: admission must look

	mu        sync.Mutex
	lim       *rate.Limiter // made at the first 429
	base      float64       // the rate set at the last cut
	lastCut   time.Time
	lastRej   time.Time     // the last 429
	holdUntil time.Time     // a 429's Retry-After
	quiet     time.Duration // idle after this without a 429
}

// delay reserves the next new call's place at now and returns how long it
// must wait for it, whether that wait is a 429's Retry-After (held), and
// cancel to give the place back should the call not wait. Zero when the
// pace is idle.
func (p *pace) delay(now time.Time) (d time.Duration, held bool, cancel func()) {
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

// record hears an attempt that ended at now: whether it was answered 429,
// with resp's Retry-After, if any, held up to maxHold. accepted is the
// rate the dependency accepted lately, read at a cut.
func (p *pace) record(now time.Time, resp *http.Response, maxHold time.Duration, accepted func() float64) {
	throttled := resp != nil && resp.StatusCode == http.StatusTooManyRequests
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
		if ra, ok := backoff.RetryAfter(resp, now); ok && ra <= maxHold && now.Add(ra).After(p.holdUntil) {
			p.holdUntil = now.Add(ra)
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
