package retryfuseotel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
)

// A breaker scope under new settings is no transition, and its version is
// a gauge; the single-flight and fallback actions name themselves, the
// shared call among them.

func TestHooksBreakerSettingsVersion(t *testing.T) {
	h := newHarness(t)
	set := breaker.Settings{FailureThreshold: 5, Version: 3}
	h.hooks.BreakerChange(breaker.Change{Scope: "api:443", From: breaker.Open, To: breaker.Open, Settings: set})
	assertLines(t, "metrics after a change of settings", h.metrics(), []string{
		"retryfuse.breaker.settings.version{retryfuse.breaker.scope=api:443} 3",
	})
	set.Version = 4
	h.hooks.BreakerChange(breaker.Change{Scope: "api:443", From: breaker.Open, To: breaker.HalfOpen, Settings: set})
	assertLines(t, "metrics after a transition", h.metrics(), []string{
		"retryfuse.breaker.settings.version{retryfuse.breaker.scope=api:443} 4",
		"retryfuse.breaker.transitions{retryfuse.breaker.from=open,retryfuse.breaker.scope=api:443,retryfuse.breaker.to=half_open} 1",
		"retryfuse.breaker.state{retryfuse.breaker.scope=api:443,retryfuse.breaker.state=open} 0",
		"retryfuse.breaker.state{retryfuse.breaker.scope=api:443,retryfuse.breaker.state=half_open} 1",
	})
}

func TestHooksSingleFlightAndFallbackActions(t *testing.T) {
	h := newHarness(t)
	ctx, span := h.tp.Tracer("test").Start(context.Background(), "call")
	ci := retryfuse.CallInfo{Context: ctx, CallID: 8, Method: "GET", URL: "http://x/"}
	h.hooks.Policy(retryfuse.PolicyInfo{CallInfo: ci, Policy: "single_flight", Action: "followed", SharedCallID: 5})
	h.hooks.Policy(retryfuse.PolicyInfo{CallInfo: ci, Policy: "single_flight", Action: "unshared", SharedCallID: 5, Err: errors.New("over the bound")})
	h.hooks.Policy(retryfuse.PolicyInfo{CallInfo: ci, Policy: "fallback", Action: "withheld", Err: retryfuse.ErrAttemptsExhausted})
	span.End()
	assertEvents(t, events(t, h.spans.Ended()[0]), []string{
		"retryfuse.policy{retryfuse.attempt.number=0,retryfuse.policy.action=followed,retryfuse.policy=single_flight,retryfuse.single_flight.call_id=5}",
		"retryfuse.policy{retryfuse.attempt.number=0,retryfuse.policy.action=unshared,retryfuse.policy=single_flight,retryfuse.reason=other,retryfuse.single_flight.call_id=5}",
		"retryfuse.policy{retryfuse.attempt.number=0,retryfuse.policy.action=withheld,retryfuse.policy=fallback,retryfuse.reason=attempts_exhausted}",
	})
	assertLines(t, "metrics", h.metrics(), []string{
		"retryfuse.policy.actions{http.request.method=GET,retryfuse.policy=single_flight,retryfuse.policy.action=followed} 1",
		"retryfuse.policy.actions{http.request.method=GET,retryfuse.policy=single_flight,retryfuse.policy.action=unshared} 1",
		"retryfuse.policy.actions{http.request.method=GET,retryfuse.policy=fallback,retryfuse.policy.action=withheld} 1",
	})
}
