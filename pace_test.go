package retryfuse

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// quotaBase accepts at most a rate (a token bucket on the fake clock, a
// tenth of a second's burst) and answers the rest 429 at once.
type quotaBase struct {
	clk                *fakeClock
	lim                *rate.Limiter
	received, accepted int
}

func (b *quotaBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.received++
	code := http.StatusTooManyRequests
	if b.lim.AllowN(b.clk.Now(), 1) {
		b.accepted++
		code = http.StatusOK
	}
	return &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// The pace learnt from 429s keeps what a quota dependency receives close
// to what it accepts, spacing new calls rather than refusing them, and
// holds no call once the load has fallen below the quota.
func TestPaceKeepsToAQuota(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	const quota = 200.0
	base := &quotaBase{clk: clk, lim: rate.NewLimiter(quota, int(quota/10))}
	var waited int
	tr := newTransport(t, clk, &Transport{Base: base, Hooks: Hooks{Policy: func(i PolicyInfo) {
		if i.Policy == policyThrottle && i.Action == actionWaited {
			waited++
		}
	}}})
	// Offered 2× the quota for 5 s, then half of it for 2 s; a call
	// arrives at its time, or when the one before it ended.
	run := func(from, until time.Time, gap time.Duration) (refused int) {
		next := from
		for next.Before(until) {
			if now := clk.Now(); now.Before(next) {
				clk.Advance(next.Sub(now))
			}
			_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			var rl *RateLimitError
			if errors.As(err, &rl) || errors.Is(err, errThrottled) {
				refused++
			}
			next = next.Add(gap)
		}
		return refused
	}
	over := fixedStart.Add(5 * time.Second)
	run(fixedStart, over, time.Second/(2*quota))
	received, accepted, took := base.received, base.accepted, clk.Now().Sub(fixedStart)
	if ratio := float64(received) / float64(accepted); ratio > 1.3 {
		t.Errorf("during 2× the quota: %d received, %d accepted (%.2f per accepted), want at most 1.3", received, accepted, ratio)
	}
	// One caller at a time, each waiting for its place: the goodput is
	// the accepted over the time they took.
	if share := float64(accepted) / (quota * took.Seconds()); share < 0.75 {
		t.Errorf("during 2× the quota: %d accepted in %v, %.2f of the quota, want at least 0.75", accepted, took, share)
	}
	// The load falls: from half a second on, nothing is held or refused.
	run(clk.Now(), clk.Now().Add(500*time.Millisecond), time.Second/(quota/2))
	waited = 0
	if refused := run(clk.Now(), clk.Now().Add(2*time.Second), time.Second/(quota/2)); refused != 0 || waited != 0 {
		t.Errorf("after the load fell: %d refused, %d held, want none", refused, waited)
	}
}

// A 429's Retry-After holds new calls until it has passed: the next call
// waits for it (within MaxRetryAfter) rather than being sent to meet
// another 429, and the pace falls idle once the quiet has passed.
func TestPaceHoldsNewCallsForRetryAfter(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	var sentAt []time.Time
	first := true
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sentAt = append(sentAt, clk.Now())
		code, h := http.StatusOK, http.Header{}
		if first {
			first = false
			code = http.StatusTooManyRequests
			h.Set("Retry-After", "2")
		}
		return &http.Response{StatusCode: code, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	})
	var waits []time.Duration
	tr := newTransport(t, clk, &Transport{
		Base: base,
		Retry: RetryPolicy{
			MaxAttempts: 1,
		},
		Hooks: Hooks{Policy: func(i PolicyInfo) {
			if i.Policy == policyThrottle && i.Action == actionWaited {
				waits = append(waits, i.Wait)
			}
		}},
	})
	for range 2 {
		if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")); err != nil {
			t.Fatal(err)
		}
	}
	if len(sentAt) != 2 || sentAt[1].Sub(sentAt[0]) < 2*time.Second {
		t.Errorf("sent at %v, want the second call 2s after the 429", sentAt)
	}
	if len(waits) != 1 || waits[0] != 2*time.Second {
		t.Errorf("waits %v, want one of 2s", waits)
	}
	clk.Advance(time.Second)
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")); err != nil || len(waits) != 1 {
		t.Errorf("after the quiet: err %v, waits %v; want no wait", err, waits)
	}
}

// At a 429 the pace is set to the rate the dependency accepted lately,
// once however many 429s come back together: calls that arrive at once
// are spaced at that rate beyond a tenth of a second's burst.
func TestPaceSpacesCallsAtTheAcceptedRate(t *testing.T) {
	var p pace
	p.quiet = 500 * time.Millisecond
	now := fixedStart
	resp429 := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
	reads := 0
	accepted := func() float64 { reads++; return 200 }
	for range 50 { // the attempts in flight at the 429 all come back 429
		p.record(now, resp429, time.Minute, accepted)
	}
	if reads != 1 {
		t.Errorf("the rate was set %d times by 50 429s together, want once", reads)
	}
	var last time.Duration
	for i := range 60 {
		d, held, _ := p.delay(now)
		if held {
			t.Fatalf("call %d: held, without a Retry-After", i)
		}
		last = d
	}
	// 60 places at 200/s with a burst of 20: the last 40 after the burst,
	// the 60th at 40/200 s.
	if want := 200 * time.Millisecond; last < want-5*time.Millisecond || last > want+5*time.Millisecond {
		t.Errorf("the 60th call's place: %v, want about %v", last, want)
	}
	// Quiet for half a second: idle, nothing held.
	if d, _, _ := p.delay(now.Add(time.Second)); d != 0 {
		t.Errorf("after the quiet: held %v, want none", d)
	}
}

// The places taken during a Retry-After are spaced by the rate from its
// end, even when more 429s come back meanwhile.
func TestPacePlacesAfterRetryAfterStaySpaced(t *testing.T) {
	var p pace
	p.quiet = 500 * time.Millisecond
	now := fixedStart
	held := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"2"}}}
	again := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
	ten := func() float64 { return 10 }
	p.record(now, held, time.Minute, ten)
	var places []time.Duration
	for i := range 5 {
		d, wasHeld, _ := p.delay(now)
		if !wasHeld {
			t.Errorf("call %d: not held during the Retry-After", i)
		}
		places = append(places, d)
		now = now.Add(10 * time.Millisecond)
		p.record(now, again, time.Minute, ten) // an attempt in flight comes back 429
	}
	for i := 1; i < len(places); i++ {
		// Each place is a tenth of a second after the one before, less the
		// 10ms that passed between the two calls.
		if gap := places[i] + 10*time.Millisecond - places[i-1]; gap < 90*time.Millisecond {
			t.Errorf("places %v: call %d goes %v after call %d, want about 100ms", places, i, gap, i-1)
		}
	}
}

// A clock that went back makes the pace idle rather than hold calls for
// ever on a rate it cannot date.
func TestPaceClockGoneBack(t *testing.T) {
	var p pace
	p.quiet = 500 * time.Millisecond
	now := fixedStart
	p.record(now, &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}, time.Minute, func() float64 { return 10 })
	back := now.Add(-time.Minute)
	p.record(back, nil, 0, nil)
	for i := range 5 {
		if d, _, _ := p.delay(back); d > time.Second {
			t.Errorf("a minute back, call %d: held %v, want no hold past a second", i, d)
		}
	}
}
