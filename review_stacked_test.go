package retryfuse

import (
	"errors"
	"net/http"
	"syscall"
	"testing"
)

// A *CircuitOpenError unwraps to the failure that opened the circuit, a
// refused connection say; it is nonetheless a local refusal, nothing was
// sent, and repeating it within a backoff cannot succeed.
func TestRvCircuitOpenErrorIsNotTransient(t *testing.T) {
	err := &CircuitOpenError{Scope: "http://rv.invalid:80", Cause: syscall.ECONNREFUSED}
	if got := DefaultClassify(nil, err); got != ClassFinal {
		t.Errorf("DefaultClassify(*CircuitOpenError caused by ECONNREFUSED): got %v, want ClassFinal", got)
	}
}

// A Transport over a Transport whose breaker has opened: the outer one
// must not take the inner one's refusal for a transient failure of the
// dependency and wait and repeat it.
func TestRvStackedOuterDoesNotRepeatAnInnerBreakerRefusal(t *testing.T) {
	url := refusedURL(t)
	b, err := NewBreaker(BreakerSettings{FailureThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	inner := newTransport(t, newFakeClock(), &Transport{Breaker: b})
	outerClk := newFakeClock()
	outer := newTransport(t, outerClk, &Transport{Base: inner, MaxAttempts: 4, Budget: UnlimitedBudget{}})

	_, _, err = do(outer, newRequest(t, testCtx(t), http.MethodGet, url, ""))
	if !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Do: got %v, want the inner breaker's refusal (ErrCircuitOpen)", err)
	}
	if got := outerClk.Sleeps(); len(got) != 1 {
		t.Errorf("outer waits: got %v, want 1 (after the refused connection only, none to repeat the breaker's refusal)", got)
	}
}
