package retryfuse

import (
	"errors"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
)

// A Transport whose Base leads back to it through another Transport is
// invalid. Working out whether the base traces must not set the other
// Transport up: its setup walks back into this one's, still running, and
// sync.Once deadlocks.
func TestBaseCycleThroughAnotherTransportIsInvalid(t *testing.T) {
	a, b := &Transport{}, &Transport{}
	a.Base, b.Base = b, a
	got := make(chan error, 1)
	go func() { got <- a.Validate() }()
	select {
	case err := <-got:
		if !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("Validate: got %v, want an error wrapping ErrInvalidPolicy", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Validate did not return within 5s: setting up a cycle of Transports deadlocks")
	}
}

func TestInvalidPolicyIsAnErrorAndSendsNothing(t *testing.T) {
	tests := []struct {
		name string
		tr   *Transport
	}{
		{"negative Retry.MaxAttempts", &Transport{Retry: RetryPolicy{MaxAttempts: -1}}},
		{"negative Retry.InitialBackoff", &Transport{Retry: RetryPolicy{InitialBackoff: -time.Second}}},
		{"negative Retry.MaxBackoff", &Transport{Retry: RetryPolicy{MaxBackoff: -time.Second}}},
		{"Retry.MaxBackoff below Retry.InitialBackoff", &Transport{Retry: RetryPolicy{InitialBackoff: 2 * time.Second, MaxBackoff: time.Second}}},
		{"negative Retry.AttemptTimeout", &Transport{Retry: RetryPolicy{AttemptTimeout: -time.Second}}},
		{"negative Retry.MaxRetryAfter", &Transport{Retry: RetryPolicy{MaxRetryAfter: -time.Second}}},
		{"negative Retry.MaxFailureStreak", &Transport{Retry: RetryPolicy{MaxFailureStreak: -1}}},
		{"negative Retry.MaxCallCost", &Transport{Retry: RetryPolicy{MaxCallCost: -1}}},
		{"NaN Retry.MaxCallCost", &Transport{Retry: RetryPolicy{MaxCallCost: math.NaN()}}},
		{"infinite Retry.MaxCallCost", &Transport{Retry: RetryPolicy{MaxCallCost: math.Inf(1)}}},
		{"negative Retry.TimeoutCost", &Transport{Retry: RetryPolicy{TimeoutCost: -1}}},
		{"NaN Retry.TimeoutCost", &Transport{Retry: RetryPolicy{TimeoutCost: math.NaN()}}},
		{"infinite Retry.TimeoutCost", &Transport{Retry: RetryPolicy{TimeoutCost: math.Inf(1)}}},
		{"negative Retry.MaxDrainBytes", &Transport{Retry: RetryPolicy{MaxDrainBytes: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := statusServer(t, 200, "ok")
			tr := tt.tr
			if err := tr.Validate(); !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("Validate: got %v, want an error wrapping ErrInvalidPolicy", err)
			}
			for range 2 { // the error stays
				_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
				if !errors.Is(err, ErrInvalidPolicy) {
					t.Errorf("Do: got %v, want an error wrapping ErrInvalidPolicy", err)
				}
			}
			if got := srv.count(); got != 0 {
				t.Errorf("requests seen by the server: got %d, want 0", got)
			}
		})
	}
	t.Run("Base is the Transport itself", func(t *testing.T) {
		tr := &Transport{}
		tr.Base = tr
		if err := tr.Validate(); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("Validate: got %v, want an error wrapping ErrInvalidPolicy", err)
		}
	})
	t.Run("zero value is valid", func(t *testing.T) {
		tr := &Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		if err := tr.Validate(); err != nil {
			t.Errorf("Validate: got %v, want nil", err)
		}
	})
}

// The message says what InitialBackoff is when the caller never set it:
// its default.
func TestMaxBackoffBelowInitialBackoffNamesItsValue(t *testing.T) {
	tests := []struct {
		name string
		tr   *Transport
		want string
	}{
		{"Retry.InitialBackoff left zero", &Transport{Retry: RetryPolicy{MaxBackoff: 50 * time.Millisecond}},
			"retryfuse: invalid policy: Retry.MaxBackoff 50ms must not be below Retry.InitialBackoff (100ms, its default)"},
		{"both set", &Transport{Retry: RetryPolicy{InitialBackoff: 2 * time.Second, MaxBackoff: time.Second}},
			"retryfuse: invalid policy: Retry.MaxBackoff 1s must not be below Retry.InitialBackoff 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.tr.Validate()
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("Validate: got %v, want an error wrapping ErrInvalidPolicy", err)
			}
			if err.Error() != tt.want {
				t.Errorf("Validate: got %q, want %q", err, tt.want)
			}
		})
	}
}

// A zero MaxBackoff follows a long InitialBackoff rather than making the
// policy invalid: only values the caller set can conflict.
func TestLongInitialBackoffWithDefaultMaxBackoff(t *testing.T) {
	tr := &Transport{Retry: RetryPolicy{InitialBackoff: 20 * time.Second}}
	if err := tr.Validate(); err != nil {
		t.Fatalf("Validate: got %v, want nil", err)
	}
	if got := tr.p.maxBackoff; got != 20*time.Second {
		t.Errorf("resolved Retry.MaxBackoff: got %v, want 20s", got)
	}
}

// CloseIdleConnections of a Transport whose Base is itself, or leads back
// to it, returns: an invalid Base is not kept, so there is nothing to
// recurse into (it used to overflow the stack, through
// http.Client.CloseIdleConnections too).
func TestCloseIdleConnectionsOfAnInvalidBaseReturns(t *testing.T) {
	self := &Transport{}
	self.Base = self
	a, b := &Transport{}, &Transport{}
	a.Base, b.Base = b, a
	for name, tr := range map[string]*Transport{"itself": self, "a cycle": a} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			(&http.Client{Transport: tr}).CloseIdleConnections()
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Base %s: CloseIdleConnections did not return within 5s", name)
		}
		if err := tr.Validate(); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("Base %s: Validate: got %v, want an error wrapping ErrInvalidPolicy", name, err)
		}
	}
}

// Settings, collaborators included, are read once, at the first use; Hooks
// are read on every call.
func TestSettingsChangedAfterFirstUseAreNotSeenButHooksAre(t *testing.T) {
	srv := statusServer(t, http.StatusServiceUnavailable, "down")
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 1, Budget: budget.Unlimited()}})
	resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first call: got %v, %v; want the 503", resp, err)
	}

	open, err := breaker.New(breaker.Settings{FailureThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ticket, _, _ := open.Allow("everything", now)
	ticket.Done(breaker.Failure, errors.New("down"), now)
	if got := open.StateAt("everything", now); got != breaker.Open {
		t.Fatalf("breaker: got %v, want open", got)
	}
	var scoped, classified bool
	tr.Brake.Breaker = open
	tr.Scope.Of = func(*http.Request) string { scoped = true; return "everything" }
	tr.Retry.MaxAttempts = 3
	tr.Retry.Classifier = func(*http.Response, error) Class { classified = true; return ClassFinal }
	var decisions int
	tr.Hooks.Decision = func(DecisionInfo) { decisions++ }

	resp, _, err = do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second call: got %v, %v; want the 503 of one attempt", resp, err)
	}
	if got := srv.count(); got != 2 {
		t.Errorf("requests seen by the server: got %d, want 2 (one per call: Retry.MaxAttempts stays 1)", got)
	}
	if scoped || classified {
		t.Errorf("a Scope or Classifier set after the first use was called (scope %v, classifier %v)", scoped, classified)
	}
	if decisions == 0 {
		t.Error("a Decision hook set after the first use was not called")
	}
}

// MaxAttempts above 5 is not cut short by the decision core's failure
// threshold when that is left zero: it follows MaxAttempts.
func TestZeroMaxFailureStreakFollowsMaxAttempts(t *testing.T) {
	srv := statusServer(t, http.StatusServiceUnavailable, "down")
	var reasons []string
	tr := newTransport(t, newFakeClock(), &Transport{
		Retry: RetryPolicy{
			MaxAttempts: 10,
			Budget:      budget.Unlimited(),
		},
		Hooks: Hooks{GiveUp: func(i GiveUpInfo) { reasons = append(reasons, ReasonName(i.Reason)) }},
	})
	resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("got %v, %v; want the last 503", resp, err)
	}
	if got := srv.count(); got != 10 {
		t.Errorf("requests seen by the server: got %d, want 10 (Retry.MaxAttempts)", got)
	}
	if len(reasons) != 1 {
		t.Fatalf("GiveUp reasons: got %v, want one", reasons)
	}

	explicit := statusServer(t, http.StatusServiceUnavailable, "down")
	tr = newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 10, MaxFailureStreak: 4, Budget: budget.Unlimited()}})
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, explicit.URL, "")); err != nil {
		t.Fatal(err)
	}
	if got := explicit.count(); got != 4 {
		t.Errorf("with Retry.MaxFailureStreak 4: got %d requests, want 4", got)
	}
}

// Before any attempt, with nothing known of the key, the decision core
// lets every request go under every policy a Transport accepts, so that a
// call need not ask it (call.run): the least brakes a Transport resolves
// are one failed attempt and the smallest positive cost.
func TestNothingStopsAFirstAttemptWithAFreeKey(t *testing.T) {
	for _, tr := range []*Transport{{}, {Retry: RetryPolicy{MaxAttempts: 1, MaxFailureStreak: 1, MaxCallCost: math.SmallestNonzeroFloat64}}} {
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, method := range []string{"GET", "POST", "PATCH", "DELETE", "BREW", ""} {
			for _, key := range []bool{false, true} {
				for _, replayable := range []bool{false, true} {
					for _, honours := range []bool{false, true} {
						req := decide.Request{Method: method, IdempotencyKey: key, ReplayableBody: replayable, ServerHonoursKeys: honours && key}
						v := decide.Decide(decide.Input{Version: decide.Version, Policy: tr.p.decision, Request: req, KeyState: decide.KeyNone})
						if v.Decision != decide.ReplaySafe {
							t.Errorf("policy %+v, request %+v: %v, want replay_safe", tr.p.decision, req, v)
						}
					}
				}
			}
		}
	}
}
