package retryfuse

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/internal/throttle"
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
	tr := newTransport(t, clk, &Transport{Base: base, Load: LoadPolicy{Pace: true}, Hooks: Hooks{Policy: func(i PolicyInfo) {
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
			if errors.As(err, &rl) || errors.Is(err, throttle.ErrThrottled) {
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
// waits for it (within MaxWait) rather than being sent to meet
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
		Load: LoadPolicy{Pace: true, MaxWait: 3 * time.Second},
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

// A 429's Retry-After holds new calls only up to MaxRetryAfter: one above
// it is not waited for, as a retry does not wait for it, and the next call
// goes at once (the pace, just learnt, has its first place free). One at
// or under it holds the next call for as long as it asks when that is
// within MaxWait, the one bound of admission's waits; beyond MaxWait the
// next call is refused at once, having sent nothing.
func TestPaceHoldsNoCallForARetryAfterAboveMaxRetryAfter(t *testing.T) {
	const maxRetryAfter, maxWait = 5 * time.Second, 4 * time.Second
	for _, tt := range []struct {
		retryAfter string
		wantHold   time.Duration // 0: the next call is not held
		refused    bool          // the next call is refused, not held
	}{
		{"6", 0, false},    // above the cap
		{"3600", 0, false}, // far above it
		{"5", 0, true},     // at the cap, above MaxWait
		{"4", maxWait, false},
		{"3", 3 * time.Second, false},
	} {
		t.Run("Retry-After "+tt.retryAfter, func(t *testing.T) {
			clk := newFakeClockAt(fixedStart)
			var sentAt []time.Time
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				code, h := http.StatusOK, http.Header{}
				if len(sentAt) == 0 {
					code = http.StatusTooManyRequests
					h.Set("Retry-After", tt.retryAfter)
				}
				sentAt = append(sentAt, clk.Now())
				return &http.Response{StatusCode: code, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
			})
			var events []PolicyInfo
			tr := newTransport(t, clk, &Transport{
				Base:  base,
				Retry: RetryPolicy{MaxAttempts: 1, MaxRetryAfter: maxRetryAfter},
				Load:  LoadPolicy{Pace: true, MaxWait: maxWait},
				Hooks: Hooks{Policy: func(i PolicyInfo) {
					if i.Policy == policyThrottle {
						events = append(events, i)
					}
				}},
			})
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			if err != nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("the first call: got %v, %v; want its 429", resp, err)
			}
			resp, _, err = do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			if tt.refused {
				var rl *RateLimitError
				if !errors.As(err, &rl) || !rl.Learnt || rl.RetryAfter != maxRetryAfter {
					t.Fatalf("the next call: got %v, %v; want a *RateLimitError (Learnt) of 5s", resp, err)
				}
				if len(sentAt) != 1 || clk.Now() != sentAt[0] {
					t.Errorf("sent at %v, now %v; want nothing more sent and no wait", sentAt, clk.Now())
				}
				return
			}
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("the next call: got %v, %v; want it sent and answered 200", resp, err)
			}
			if len(sentAt) != 2 || sentAt[1].Sub(sentAt[0]) != tt.wantHold {
				t.Errorf("sent at %v, want the next call %v after the 429", sentAt, tt.wantHold)
			}
			if tt.wantHold == 0 {
				if len(events) != 0 {
					t.Errorf("throttle events: got %+v, want none", events)
				}
				return
			}
			if len(events) != 1 || events[0].Action != actionWaited || events[0].Wait != tt.wantHold {
				t.Errorf("throttle events: got %+v, want one waited %v", events, tt.wantHold)
			}
		})
	}
}
