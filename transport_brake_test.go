package retryfuse

import (
	"errors"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
)

// The decision core's brake, through the transport: a retryable response
// comes back as it is once MaxFailureStreak or MaxCallCost is reached, and
// the hooks say which rule braked.
func TestCoreBrakeReturnsTheLastResponse(t *testing.T) {
	tests := []struct {
		name     string
		tr       *Transport
		wantSent int
		reason   error
		rule     decide.Rule
	}{
		{"FailureThreshold 2", &Transport{Retry: RetryPolicy{MaxFailureStreak: 2}}, 2, ErrFailureStreak, decide.RuleFailureThreshold},
		{"MaxCallCost 3", &Transport{Retry: RetryPolicy{MaxCallCost: 3}}, 3, ErrCallCost, decide.RuleCostBudget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := statusServer(t, http.StatusServiceUnavailable, "down")
			var log hookLog
			tt.tr.Retry.MaxAttempts, tt.tr.Retry.Budget, tt.tr.Hooks = 10, budget.Unlimited(), log.hooks()
			tr := newTransport(t, newFakeClock(), tt.tr)
			resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			if err != nil || resp.StatusCode != http.StatusServiceUnavailable || string(body) != "down" {
				t.Fatalf("Do: got %v, %q, %v; want the last 503 with a nil error", resp, body, err)
			}
			if got := srv.count(); got != tt.wantSent {
				t.Errorf("requests seen by the server: got %d, want %d", got, tt.wantSent)
			}
			if got := log.giveUpReasons(); len(got) != 1 || !errors.Is(got[0], tt.reason) {
				t.Errorf("GiveUp reasons: got %v, want [%v]", got, tt.reason)
			}
			last := log.decisions[len(log.decisions)-1].Verdict
			if last.Decision != decide.Brake || last.Evidence != decide.EvidenceFail || last.Rule != tt.rule {
				t.Errorf("last verdict: got %+v, want brake/fail by rule %d", last, tt.rule)
			}
		})
	}
}

// Without a response to give, the brake is an error matching the rule's
// sentinel, with the last attempt's error still reachable.
func TestCoreBrakeWithoutResponseIsAnError(t *testing.T) {
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 10, MaxFailureStreak: 2, Budget: budget.Unlimited()}})
	_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, refusedURL(t), ""))
	if !errors.Is(err, ErrFailureStreak) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Do: got %v; want an error matching ErrFailureStreak and ECONNREFUSED", err)
	}
	var re *RetryError
	if !errors.As(err, &re) || re.Attempts != 2 {
		t.Errorf("RetryError: got %+v, want 2 attempts", re)
	}
}

// TimeoutCost weighs an attempt that timed out: at 3 against MaxCallCost
// 3, one timeout brakes the call, where at the default cost of 1 the GET
// is repeated and succeeds.
func TestTimeoutCostBrakesOnTimeouts(t *testing.T) {
	tests := []struct {
		timeoutCost float64
		wantSent    int
		wantErr     error
	}{
		{0, 2, nil},
		{3, 1, ErrCallCost},
	}
	for _, tt := range tests {
		t.Run("TimeoutCost "+strconv.FormatFloat(tt.timeoutCost, 'g', -1, 64), func(t *testing.T) {
			srv := newTestServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					<-r.Context().Done() // stalls past the attempt timeout
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			tr := newTransport(t, newFakeClock(), &Transport{
				Retry: RetryPolicy{
					AttemptTimeout: 50 * time.Millisecond,
					MaxCallCost:    3,
					TimeoutCost:    tt.timeoutCost,
					Budget:         budget.Unlimited(),
				},
			})
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			switch {
			case tt.wantErr == nil && (err != nil || resp.StatusCode != http.StatusOK):
				t.Errorf("Do: got %v, %v; want 200 after one retry", resp, err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("Do: got %v, %v; want an error matching %v", resp, err, tt.wantErr)
			}
			if got := srv.count(); got != tt.wantSent {
				t.Errorf("requests seen by the server: got %d, want %d", got, tt.wantSent)
			}
		})
	}
}
