package retryfuse

import (
	"math"
	"net/http"
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
// The rate is learnt as AWS SDK v2's adaptive retry mode learns it
// (CUBIC, RFC 8312): at a 429 the rate falls to β = 0.7 of the rate then
// sent (measured, at most the pace's own), and from there grows back
// along a cubic, C·(t − W)³ + the rate at the 429, W being the time it
// takes to regain that rate, cbrt(rate·(1 − β)/C), C = 0.4 — slowly near
// it, faster past it, probing for more. It never exceeds twice the rate
// measured, and never falls below paceMinRate. The bucket is
// golang.org/x/time/rate's, with a burst of a second's worth (at least
// one); a 429's Retry-After (capped by MaxRetryAfter) holds new calls
// until it has passed.
//
// The pace is idle until a 429 (admission then costs one atomic load)
// and falls idle again once no 429 has come for a quarter of the
// throttle's window (half a second by default): a call of a client whose
// load has fallen is never held for a rate it learnt under load, and a
// client still above the quota meets a 429 soon and paces again, from
// the rate the dependency accepted meanwhile.

// The constants of the pace, AWS SDK v2's.
const (
	paceBeta      = 0.7
	paceScale     = 0.4 // C, in calls per second per second cubed
	paceMinRate   = 0.5 // calls per second
	paceSmoothing = 0.8 // of the measured rate, per half second
)

// pace is a scope's learnt send rate. Its methods are safe for concurrent
// use. The zero value is an idle pace.
type pace struct {
	active atomic.Bool // a 429 came lately: admission must look

	mu        sync.Mutex
	lim       *rate.Limiter // made at the first 429
	maxRate   float64       // the rate at the last 429
	window    float64       // W, in seconds
	lastRej   time.Time     // the last 429
	holdUntil time.Time     // a 429's Retry-After
	quiet     time.Duration // the throttle's window: idle after W or this without a 429

	// The rate measured: attempts ended per half second, smoothed.
	measured float64
	bucket   time.Time // the start of the half second counted
	count    float64
}

// delay reserves the next new call's place at now and returns how long it
// must wait for it, whether that wait is a 429's Retry-After (held), and
// cancel to give the place back should the call not wait. Zero when the
// pace is idle. The places after a Retry-After are spaced by the rate from
// its end, so that the calls held do not all go at once.
func (p *pace) delay(now time.Time) (d time.Duration, held bool, cancel func()) {
	if !p.active.Load() {
		return 0, false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Sub(p.lastRej) >= p.quiet && !now.Before(p.holdUntil) {
		p.active.Store(false) // no 429 for long enough: the rate is regained
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
// with resp's Retry-After, if any, held up to maxHold. sentRate is the
// rate of the scope's attempts before the first 429, to start from.
func (p *pace) record(now time.Time, resp *http.Response, maxHold time.Duration, sentRate func() float64) {
	throttled := resp != nil && resp.StatusCode == http.StatusTooManyRequests
	if !throttled && !p.active.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !throttled && !p.active.Load():
		return // fell idle meanwhile
	case !p.active.Load():
		// The first 429, or the first since the pace fell idle: start from
		// the rate sent lately.
		p.measured, p.count, p.bucket = sentRate(), 0, now
	default:
		p.measure(now)
	}
	var target float64
	if throttled {
		from := p.measured
		if p.lim != nil && p.active.Load() {
			from = min(from, float64(p.lim.Limit()))
		}
		p.maxRate = max(from, paceMinRate)
		p.window = math.Cbrt(p.maxRate * (1 - paceBeta) / paceScale)
		p.lastRej = now
		target = p.maxRate * paceBeta
		if ra, ok := retryAfter(resp, now); ok && ra <= maxHold && now.Add(ra).After(p.holdUntil) {
			p.holdUntil = now.Add(ra)
		}
		p.active.Store(true)
	} else {
		t := now.Sub(p.lastRej).Seconds() - p.window
		target = paceScale*t*t*t + p.maxRate
	}
	target = max(paceMinRate, min(target, 2*p.measured))
	burst := max(1, int(target/10)) // a tenth of a second's worth
	if p.lim == nil {
		p.lim = rate.NewLimiter(rate.Limit(target), burst)
		return
	}
	p.lim.SetLimitAt(now, rate.Limit(target))
	p.lim.SetBurstAt(now, burst)
}

// measure counts one attempt into the rate measured. p.mu is held.
func (p *pace) measure(now time.Time) {
	p.count++
	if d := now.Sub(p.bucket); d >= time.Second/2 {
		p.measured = p.count/d.Seconds()*paceSmoothing + p.measured*(1-paceSmoothing)
		p.count, p.bucket = 0, now
	}
}
