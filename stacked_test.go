package retryfuse

import (
	"errors"
	"net/http"
	"syscall"
	"testing"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
)

// A Transport over a Transport does not multiply the load: the inner one
// passes each attempt of the outer through, and still reports it.
func TestStackedTransportsDoNotMultiplyAttempts(t *testing.T) {
	srv := statusServer(t, 503, "down")
	innerClk, outerClk := newFakeClock(), newFakeClock()
	var innerLog, outerLog hookLog
	inner := newTransport(t, innerClk, &Transport{Retry: RetryPolicy{MaxAttempts: 3}, Hooks: innerLog.hooks()})
	outer := newTransport(t, outerClk, &Transport{Base: inner, Retry: RetryPolicy{MaxAttempts: 3}, Hooks: outerLog.hooks()})

	resp, _, err := do(outer, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("Do: got %v, %v; want the final 503", resp, err)
	}
	if got := srv.count(); got != 3 {
		t.Errorf("requests seen by the server: got %d, want 3 (one layer's MaxAttempts)", got)
	}
	if got := innerClk.Sleeps(); len(got) != 0 {
		t.Errorf("inner waits: got %v, want none", got)
	}
	if got := len(outerClk.Sleeps()); got != 2 {
		t.Errorf("outer waits: got %d, want 2", got)
	}
	innerLog.mu.Lock()
	defer innerLog.mu.Unlock()
	if len(innerLog.dones) != 3 {
		t.Errorf("inner AttemptDone events: got %d, want 3", len(innerLog.dones))
	}
	for i, d := range innerLog.dones {
		if d.StatusCode != 503 {
			t.Errorf("inner AttemptDone %d: status %d, want 503", i, d.StatusCode)
		}
	}
	outerLog.mu.Lock()
	defer outerLog.mu.Unlock()
	if len(outerLog.dones) != 3 {
		t.Errorf("outer AttemptDone events: got %d, want 3", len(outerLog.dones))
	}
}

func TestStackedTransportsDoNotMultiplyAttemptsOnErrors(t *testing.T) {
	url := refusedURL(t)
	var innerLog hookLog
	inner := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 4}, Hooks: innerLog.hooks()})
	outer := newTransport(t, newFakeClock(), &Transport{Base: inner, Retry: RetryPolicy{MaxAttempts: 2}})
	_, _, err := do(outer, newRequest(t, testCtx(t), http.MethodGet, url, ""))
	if !errors.Is(err, ErrAttemptsExhausted) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Do: got %v, want ErrAttemptsExhausted and ECONNREFUSED", err)
	}
	innerLog.mu.Lock()
	defer innerLog.mu.Unlock()
	if len(innerLog.dones) != 2 {
		t.Errorf("inner attempts: got %d, want 2 (the outer's MaxAttempts)", len(innerLog.dones))
	}
	for i, d := range innerLog.dones {
		if d.Phase != decide.PhasePreWrite {
			t.Errorf("inner attempt %d: phase %v, want pre_write", i+1, d.Phase)
		}
	}
}

// A Transport over a Transport whose breaker has opened: the outer one
// must not take the inner one's refusal for a transient failure of the
// dependency and wait and repeat it.
func TestStackedOuterDoesNotRepeatAnInnerBreakerRefusal(t *testing.T) {
	url := refusedURL(t)
	b, err := breaker.New(breaker.Settings{FailureThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	inner := newTransport(t, newFakeClock(), &Transport{Brake: BrakePolicy{Breaker: b}})
	outerClk := newFakeClock()
	outer := newTransport(t, outerClk, &Transport{Base: inner, Retry: RetryPolicy{MaxAttempts: 4, Budget: budget.Unlimited()}})

	_, _, err = do(outer, newRequest(t, testCtx(t), http.MethodGet, url, ""))
	if !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Do: got %v, want the inner breaker's refusal (ErrCircuitOpen)", err)
	}
	if got := outerClk.Sleeps(); len(got) != 1 {
		t.Errorf("outer waits: got %v, want 1 (after the refused connection only, none to repeat the breaker's refusal)", got)
	}
}
