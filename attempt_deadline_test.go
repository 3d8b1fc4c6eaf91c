package retryfuse

import (
	"context"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// An attempt's context reports the deadline at which the attempt is cut:
// its AttemptTimeout from its start when that comes first, else the
// caller's deadline, as context.WithTimeout would. A Base that reads it (to
// send a timeout on, or to bound work of its own) sees when the attempt
// ends, on every attempt.
func TestAttemptContextReportsTheAttemptsDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tests := []struct {
		name     string
		timeout  time.Duration // AttemptTimeout
		caller   time.Duration // the caller's deadline from the start; 0: none
		attempt  bool          // each attempt's deadline is its start plus timeout
		noLimits bool          // no deadline at all
	}{
		{"AttemptTimeout, no caller's deadline: the attempt's", timeout, 0, true, false},
		{"AttemptTimeout before the caller's deadline: the attempt's", timeout, 10 * time.Second, true, false},
		{"the caller's deadline before AttemptTimeout: the caller's", timeout, 100 * time.Millisecond, false, false},
		{"no AttemptTimeout: the caller's", 0, 10 * time.Second, false, false},
		{"neither: none", 0, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			type seen struct {
				start    time.Time
				deadline time.Time
				ok       bool
			}
			var (
				mu    sync.Mutex
				seens []seen
			)
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				dl, ok := req.Context().Deadline()
				mu.Lock()
				seens = append(seens, seen{clk.Now(), dl, ok})
				n := len(seens)
				mu.Unlock()
				if n < 3 {
					return textResponse(req, http.StatusServiceUnavailable, "busy"), nil
				}
				return textResponse(req, http.StatusOK, "ok"), nil
			})
			tr := newTransport(t, clk, &Transport{
				Base: base,
				Retry: RetryPolicy{
					AttemptTimeout: tt.timeout,
					Budget:         budget.Unlimited(),
					InitialBackoff: time.Millisecond,
					MaxBackoff:     time.Millisecond,
				},
			})
			ctx := testCtx(t)
			var callerDL time.Time
			if tt.caller > 0 {
				callerDL = clk.Now().Add(tt.caller)
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, callerDL)
				defer cancel()
			}
			resp, _, err := do(tr, newRequest(t, ctx, http.MethodGet, "http://dep.test/", ""))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("Do: got %v, %v; want the 200 of the third attempt", resp, err)
			}
			if len(seens) != 3 {
				t.Fatalf("attempts: got %d, want 3", len(seens))
			}
			for i, s := range seens {
				switch {
				case tt.noLimits:
					if s.ok {
						t.Errorf("attempt %d: deadline %v, want none", i+1, s.deadline)
					}
				case tt.attempt:
					if want := s.start.Add(tt.timeout); !s.ok || !s.deadline.Equal(want) {
						t.Errorf("attempt %d: deadline %v (%v), want its start plus AttemptTimeout, %v", i+1, s.deadline, s.ok, want)
					}
				default:
					if !s.ok || !s.deadline.Equal(callerDL) {
						t.Errorf("attempt %d: deadline %v (%v), want the caller's, %v", i+1, s.deadline, s.ok, callerDL)
					}
				}
			}
		})
	}
}

// The deadline an attempt's context reports is one a Base can use as it
// is: on the real clock it has a monotonic reading, as context.WithTimeout's
// has (so a step of the wall clock does not move it), and an AttemptTimeout
// too long for any date (math.MaxInt64, "no timeout") gives a deadline far
// ahead, not one wrapped into the past (time.Time.Add drops the monotonic
// reading of a time that far, as it does for context.WithTimeout's).
func TestAttemptDeadlineIsMonotonicAndNeverWraps(t *testing.T) {
	for _, timeout := range []time.Duration{time.Second, time.Duration(math.MaxInt64)} {
		t.Run(timeout.String(), func(t *testing.T) {
			var (
				deadlines []time.Time
				oks       []bool
			)
			base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				dl, ok := req.Context().Deadline()
				deadlines, oks = append(deadlines, dl), append(oks, ok)
				if len(deadlines) == 1 {
					return textResponse(req, http.StatusServiceUnavailable, "busy"), nil
				}
				return textResponse(req, http.StatusOK, "ok"), nil
			})
			tr := &Transport{Base: base, Retry: RetryPolicy{AttemptTimeout: timeout, Budget: budget.Unlimited(), InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}
			before := time.Now()
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("Do: got %v, %v; want the retry's 200", resp, err)
			}
			for i, dl := range deadlines { // the first attempt's, and a later one's
				if !oks[i] || dl.Before(before.Add(timeout/2)) {
					t.Errorf("attempt %d: deadline %v (%v), want one at least %v ahead of the call's start", i+1, dl, oks[i], timeout/2)
				}
				if timeout == time.Second && !strings.Contains(dl.String(), " m=") {
					t.Errorf("attempt %d: deadline %v has no monotonic reading", i+1, dl)
				}
			}
		})
	}
}
