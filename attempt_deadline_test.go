package retryfuse

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
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
			tr := newTransport(t, clk, &Transport{Base: base, AttemptTimeout: tt.timeout, Budget: UnlimitedBudget(),
				InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
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
