package retryfuseotel_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/decide"
	retryfuseotel "github.com/retryfuse/retryfuse/otel"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestGETRetriedOnceThenOK(t *testing.T) {
	h := newHarness(t)
	srv := statusSequence(t, http.StatusServiceUnavailable)
	span, resp, err := h.call(fastTransport(h), http.MethodGet, srv.URL, "")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("got %v, %v; want 200, nil", resp, err)
	}
	assertLines(t, "metrics", h.metrics(), []string{
		"retryfuse.attempt.duration{http.request.method=GET,retryfuse.outcome=failure} count=1",
		"retryfuse.attempt.duration{http.request.method=GET,retryfuse.outcome=success} count=1",
		"retryfuse.attempts{http.request.method=GET,http.response.status_code=503,retryfuse.outcome=failure,retryfuse.phase=post_write} 1",
		"retryfuse.attempts{http.request.method=GET,http.response.status_code=200,retryfuse.outcome=success,retryfuse.phase=post_write} 1",
		"retryfuse.retries{http.request.method=GET,retryfuse.delay.source=backoff} 1",
		"retryfuse.retry.delay{http.request.method=GET,retryfuse.delay.source=backoff} count=1",
	})
	assertEvents(t, events(t, span), []string{
		"retryfuse.attempt{http.response.status_code=503,retryfuse.attempt.duration=*,retryfuse.attempt.number=1,retryfuse.outcome=failure,retryfuse.phase=post_write,retryfuse.retryable=true}",
		"retryfuse.decision{retryfuse.attempt.number=1,retryfuse.decision=replay_safe,retryfuse.evidence=pass,retryfuse.rule=8}",
		"retryfuse.retry{http.response.status_code=503,retryfuse.attempt.number=1,retryfuse.delay.duration=*,retryfuse.delay.source=backoff}",
		"retryfuse.attempt{http.response.status_code=200,retryfuse.attempt.duration=*,retryfuse.attempt.number=2,retryfuse.outcome=success,retryfuse.phase=post_write,retryfuse.retryable=false}",
	})
	if n, ok := resendCount(span); !ok || n != 1 {
		t.Errorf("http.request.resend_count: got %d (set %v), want 1", n, ok)
	}
}

func TestKeyedPOSTReconcile(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	tr := fastTransport(h)
	tr.Retry.AttemptTimeout = 50 * time.Millisecond

	span, _, err := h.call(tr, http.MethodPost, srv.URL+"/orders", "order-42")
	if !errors.Is(err, retryfuse.ErrReconcileRequired) {
		t.Fatalf("got %v, want ErrReconcileRequired", err)
	}
	assertLines(t, "metrics", h.metrics(), []string{
		"retryfuse.attempt.duration{http.request.method=POST,retryfuse.outcome=timeout} count=1",
		"retryfuse.attempts{http.request.method=POST,retryfuse.outcome=timeout,retryfuse.phase=post_write} 1",
		"retryfuse.reconcile_required{http.request.method=POST,retryfuse.idempotency_key.source=carried,retryfuse.phase=post_write} 1",
	})
	assertEvents(t, events(t, span), []string{
		"retryfuse.attempt{retryfuse.attempt.duration=*,retryfuse.attempt.number=1,retryfuse.outcome=timeout,retryfuse.phase=post_write,retryfuse.retryable=true}",
		"retryfuse.decision{retryfuse.attempt.number=1,retryfuse.decision=reconcile_required,retryfuse.evidence=unknown,retryfuse.rule=3}",
		"retryfuse.reconcile_required{retryfuse.attempt.number=1,retryfuse.idempotency_key.source=carried,retryfuse.idempotency_key.value=order-42,retryfuse.phase=post_write,retryfuse.reconcile.resolution=still_unknown}",
	})
	if n, ok := resendCount(span); ok {
		t.Errorf("http.request.resend_count: got %d, want unset after one attempt", n)
	}
}

// Rule 5: a POST without an idempotency key is not repeated after a 503;
// the 503 is handed back.
func TestPOSTWithoutKeyBraked(t *testing.T) {
	h := newHarness(t)
	srv := statusSequence(t, http.StatusServiceUnavailable)
	span, resp, err := h.call(fastTransport(h), http.MethodPost, srv.URL, "")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("got %v, %v; want 503, nil", resp, err)
	}
	assertLines(t, "metrics", h.metrics(), []string{
		"retryfuse.attempt.duration{http.request.method=POST,retryfuse.outcome=failure} count=1",
		"retryfuse.attempts{http.request.method=POST,http.response.status_code=503,retryfuse.outcome=failure,retryfuse.phase=post_write} 1",
		"retryfuse.brakes{http.request.method=POST,retryfuse.decision=brake,retryfuse.evidence=pass,retryfuse.rule=5} 1",
		"retryfuse.give_ups{http.request.method=POST,retryfuse.reason=not_repeatable} 1",
	})
	assertEvents(t, events(t, span), []string{
		"retryfuse.attempt{http.response.status_code=503,retryfuse.attempt.duration=*,retryfuse.attempt.number=1,retryfuse.outcome=failure,retryfuse.phase=post_write,retryfuse.retryable=true}",
		"retryfuse.decision{retryfuse.attempt.number=1,retryfuse.decision=brake,retryfuse.evidence=pass,retryfuse.rule=5}",
		"retryfuse.give_up{http.response.status_code=503,retryfuse.attempt.number=1,retryfuse.reason=not_repeatable}",
	})
	if n, ok := resendCount(span); ok {
		t.Errorf("http.request.resend_count: got %d, want unset: nothing was re-sent", n)
	}
}

// A GET whose every attempt is refused (nothing written: pre_write) is
// retried until its attempts run out.
func TestGETAttemptsExhausted(t *testing.T) {
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connections to addr are refused: nothing is written
	tr := fastTransport(h)
	tr.Retry.MaxAttempts = 2

	span, _, err := h.call(tr, http.MethodGet, "http://"+addr+"/", "")
	if !errors.Is(err, retryfuse.ErrAttemptsExhausted) {
		t.Fatalf("got %v, want ErrAttemptsExhausted", err)
	}
	assertLines(t, "metrics", h.metrics(), []string{
		"retryfuse.attempt.duration{http.request.method=GET,retryfuse.outcome=failure} count=2",
		"retryfuse.attempts{http.request.method=GET,retryfuse.outcome=failure,retryfuse.phase=pre_write} 2",
		"retryfuse.retries{http.request.method=GET,retryfuse.delay.source=backoff} 1",
		"retryfuse.retry.delay{http.request.method=GET,retryfuse.delay.source=backoff} count=1",
		"retryfuse.give_ups{http.request.method=GET,retryfuse.reason=attempts_exhausted} 1",
	})
	assertEvents(t, events(t, span), []string{
		"retryfuse.attempt{retryfuse.attempt.duration=*,retryfuse.attempt.number=1,retryfuse.outcome=failure,retryfuse.phase=pre_write,retryfuse.retryable=true}",
		"retryfuse.decision{retryfuse.attempt.number=1,retryfuse.decision=replay_safe,retryfuse.evidence=pass,retryfuse.rule=8}",
		"retryfuse.retry{retryfuse.attempt.number=1,retryfuse.delay.duration=*,retryfuse.delay.source=backoff}",
		"retryfuse.attempt{retryfuse.attempt.duration=*,retryfuse.attempt.number=2,retryfuse.outcome=failure,retryfuse.phase=pre_write,retryfuse.retryable=true}",
		"retryfuse.decision{retryfuse.attempt.number=2,retryfuse.decision=replay_safe,retryfuse.evidence=pass,retryfuse.rule=8}",
		"retryfuse.give_up{retryfuse.attempt.number=2,retryfuse.reason=attempts_exhausted}",
	})
	if n, ok := resendCount(span); !ok || n != 1 {
		t.Errorf("http.request.resend_count: got %d (set %v), want 1", n, ok)
	}
}

// Events the transport cannot yet produce on loopback are fed directly.
func TestHooksDirectEvents(t *testing.T) {
	h := newHarness(t)
	ctx, span := h.tp.Tracer("test").Start(context.Background(), "call")
	ci := retryfuse.CallInfo{Context: ctx, CallID: 1, Attempt: 1, Method: "PURGE", URL: "http://x/", IdempotencyKey: "k-1", KeyGenerated: true, Phase: decide.PhasePostWrite}
	h.hooks.HiddenResend(retryfuse.AttemptDoneInfo{CallInfo: ci, Connections: 3})
	h.hooks.EvidenceUnavailable(retryfuse.EvidenceUnavailableInfo{CallInfo: ci, Source: "ledger", Err: errors.New("down")})
	h.hooks.GiveUp(retryfuse.GiveUpInfo{CallInfo: ci, Reason: retryfuse.ErrBudgetExhausted})
	h.hooks.GiveUp(retryfuse.GiveUpInfo{CallInfo: ci, Reason: errors.New("something new")})
	h.hooks.Decision(retryfuse.DecisionInfo{CallInfo: ci, Verdict: decide.Verdict{Decision: decide.ReplaySafe, Evidence: decide.EvidencePass, Rule: 8}})
	h.hooks.Decision(retryfuse.DecisionInfo{CallInfo: ci, Verdict: decide.Verdict{Decision: decide.Brake, Evidence: decide.EvidenceFail, Rule: 6}})
	h.hooks.Decision(retryfuse.DecisionInfo{CallInfo: ci, Verdict: decide.Verdict{Decision: decide.Brake, Evidence: decide.EvidencePass, Rule: 4}, KeyState: decide.KeyInFlight})
	h.hooks.Retry(retryfuse.RetryInfo{CallInfo: ci, Delay: 2500 * time.Millisecond, Source: "retry_after", RetryAfter: 2 * time.Second,
		Err: &retryfuse.StatusError{StatusCode: 429}})
	h.hooks.Reconcile(retryfuse.ReconcileInfo{CallInfo: ci, Resolution: "not_applied"})
	hedge := ci
	hedge.Branch = 1
	h.hooks.Policy(retryfuse.PolicyInfo{CallInfo: hedge, Policy: "hedge", Action: "sent", Wait: 20 * time.Millisecond})
	h.hooks.Policy(retryfuse.PolicyInfo{CallInfo: ci, Policy: "bulkhead", Action: "rejected", Err: &retryfuse.BulkheadFullError{Scope: "http://x:80", MaxInFlight: 8}})
	span.End()
	assertEvents(t, events(t, h.spans.Ended()[0]), []string{
		"retryfuse.hidden_resend{retryfuse.attempt.number=1,retryfuse.connections=3}",
		"retryfuse.evidence_unavailable{retryfuse.attempt.number=1,retryfuse.source=ledger}",
		"retryfuse.give_up{retryfuse.attempt.number=1,retryfuse.reason=budget_exhausted}",
		"retryfuse.give_up{retryfuse.attempt.number=1,retryfuse.reason=other}",
		"retryfuse.decision{retryfuse.attempt.number=1,retryfuse.decision=replay_safe,retryfuse.evidence=pass,retryfuse.rule=8}",
		"retryfuse.decision{retryfuse.attempt.number=1,retryfuse.decision=brake,retryfuse.evidence=fail,retryfuse.rule=6}",
		"retryfuse.decision{retryfuse.attempt.number=1,retryfuse.decision=brake,retryfuse.evidence=pass,retryfuse.idempotency_key.state=in_flight,retryfuse.rule=4}",
		"retryfuse.retry{http.response.status_code=429,retryfuse.attempt.number=1,retryfuse.delay.duration=*,retryfuse.delay.retry_after=2,retryfuse.delay.source=retry_after}",
		"retryfuse.reconcile_required{retryfuse.attempt.number=1,retryfuse.idempotency_key.source=generated,retryfuse.idempotency_key.value=k-1,retryfuse.phase=post_write,retryfuse.reconcile.resolution=not_applied}",
		"retryfuse.policy{retryfuse.attempt.branch=1,retryfuse.attempt.number=1,retryfuse.policy.action=sent,retryfuse.policy.wait=0.02,retryfuse.policy=hedge}",
		"retryfuse.policy{retryfuse.attempt.number=1,retryfuse.policy.action=rejected,retryfuse.policy=bulkhead,retryfuse.reason=bulkhead_full}",
	})
	assertLines(t, "metrics", h.metrics(), []string{
		"retryfuse.hidden_resends{http.request.method=_OTHER} 2",
		"retryfuse.evidence_unavailable{http.request.method=_OTHER,retryfuse.source=ledger} 1",
		"retryfuse.give_ups{http.request.method=_OTHER,retryfuse.reason=budget_exhausted} 1",
		"retryfuse.give_ups{http.request.method=_OTHER,retryfuse.reason=other} 1",
		"retryfuse.budget.refusals{http.request.method=_OTHER} 1",
		"retryfuse.brakes{http.request.method=_OTHER,retryfuse.decision=brake,retryfuse.evidence=fail,retryfuse.rule=6} 1",
		"retryfuse.brakes{http.request.method=_OTHER,retryfuse.decision=brake,retryfuse.evidence=pass,retryfuse.rule=4} 1",
		"retryfuse.retries{http.request.method=_OTHER,retryfuse.delay.source=retry_after} 1",
		"retryfuse.retry.delay{http.request.method=_OTHER,retryfuse.delay.source=retry_after} count=1",
		"retryfuse.reconcile_required{http.request.method=_OTHER,retryfuse.idempotency_key.source=generated,retryfuse.phase=post_write} 1",
		"retryfuse.policy.actions{http.request.method=_OTHER,retryfuse.policy=hedge,retryfuse.policy.action=sent} 1",
		"retryfuse.policy.actions{http.request.method=_OTHER,retryfuse.policy=bulkhead,retryfuse.policy.action=rejected} 1",
	})
}

func TestHooksLoadEvents(t *testing.T) {
	h := newHarness(t)
	ctx, span := h.tp.Tracer("test").Start(context.Background(), "call")
	ci := retryfuse.CallInfo{Context: ctx, CallID: 3, Attempt: 1, Method: "GET", URL: "http://x/"}
	h.hooks.Policy(retryfuse.PolicyInfo{CallInfo: ci, Scope: "http://x:80", Policy: "throttle", Action: "rejected", Err: throttledError(t)})
	h.hooks.Policy(retryfuse.PolicyInfo{CallInfo: ci, Scope: "http://x:80", Policy: "adaptive_limit", Action: "changed", Limit: 9, PrevLimit: 13, Why: "latency"})
	h.hooks.Policy(retryfuse.PolicyInfo{CallInfo: ci, Scope: "http://x:80", Policy: "slow_start", Action: "started", Wait: time.Second, Limit: 1, Why: "breaker_closed"})
	span.End()
	assertEvents(t, events(t, h.spans.Ended()[0]), []string{
		"retryfuse.policy{retryfuse.attempt.number=1,retryfuse.policy.action=rejected,retryfuse.policy.scope=http://x:80,retryfuse.policy=throttle,retryfuse.reason=throttled}",
		"retryfuse.policy{retryfuse.attempt.number=1,retryfuse.policy.action=changed,retryfuse.policy.limit.previous=13,retryfuse.policy.limit=9,retryfuse.policy.scope=http://x:80,retryfuse.policy.why=latency,retryfuse.policy=adaptive_limit}",
		"retryfuse.policy{retryfuse.attempt.number=1,retryfuse.policy.action=started,retryfuse.policy.limit=1,retryfuse.policy.scope=http://x:80,retryfuse.policy.wait=1,retryfuse.policy.why=breaker_closed,retryfuse.policy=slow_start}",
	})
	assertLines(t, "metrics", h.metrics(), []string{
		"retryfuse.policy.actions{http.request.method=GET,retryfuse.policy=throttle,retryfuse.policy.action=rejected} 1",
		"retryfuse.policy.actions{http.request.method=GET,retryfuse.policy=adaptive_limit,retryfuse.policy.action=changed} 1",
		"retryfuse.policy.actions{http.request.method=GET,retryfuse.policy=slow_start,retryfuse.policy.action=started} 1",
		"retryfuse.adaptive_limit{retryfuse.policy.scope=http://x:80} 9",
	})
}

func TestHooksBreakerChange(t *testing.T) {
	closed, open, half := breaker.Closed, breaker.Open, breaker.HalfOpen
	h := newHarness(t)
	change := func(from, to breaker.State) {
		h.hooks.BreakerChange(breaker.Change{Scope: "api:443", From: from, To: to})
	}
	change(closed, open)
	change(open, half)
	assertLines(t, "metrics", h.metrics(), []string{
		"retryfuse.breaker.transitions{retryfuse.breaker.from=closed,retryfuse.breaker.scope=api:443,retryfuse.breaker.to=open} 1",
		"retryfuse.breaker.transitions{retryfuse.breaker.from=open,retryfuse.breaker.scope=api:443,retryfuse.breaker.to=half_open} 1",
		"retryfuse.breaker.state{retryfuse.breaker.scope=api:443,retryfuse.breaker.state=closed} 0",
		"retryfuse.breaker.state{retryfuse.breaker.scope=api:443,retryfuse.breaker.state=open} 0",
		"retryfuse.breaker.state{retryfuse.breaker.scope=api:443,retryfuse.breaker.state=half_open} 1",
	})
}

func TestInstrumentUnits(t *testing.T) {
	h := newHarness(t)
	ci := retryfuse.CallInfo{Method: "GET"}
	h.hooks.AttemptDone(retryfuse.AttemptDoneInfo{CallInfo: ci, Outcome: decide.OutcomeSuccess})
	h.hooks.Retry(retryfuse.RetryInfo{CallInfo: ci, Delay: 1500 * time.Millisecond, Source: "retry_after"})
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		got[m.Name] = m.Unit
		if d, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "retryfuse.retry.delay" {
			if s := d.DataPoints[0].Sum; s != 1.5 {
				t.Errorf("retryfuse.retry.delay sum: got %v, want 1.5 (seconds)", s)
			}
		}
	}
	want := map[string]string{"retryfuse.attempts": "{attempt}", "retryfuse.attempt.duration": "s", "retryfuse.retries": "{retry}", "retryfuse.retry.delay": "s"}
	for name, unit := range want {
		if got[name] != unit {
			t.Errorf("%s unit: got %q, want %q", name, got[name], unit)
		}
	}
	if scope := rm.ScopeMetrics[0].Scope.Name; scope != retryfuseotel.ScopeName {
		t.Errorf("scope: got %q, want %q", scope, retryfuseotel.ScopeName)
	}
}

// Without a span in the context, or with one that is not recording, the
// hooks record metrics only.
func TestHooksWithoutRecordingSpan(t *testing.T) {
	h := newHarness(t)
	srv := statusSequence(t, http.StatusServiceUnavailable)
	notSampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(h.spans))
	ctx, span := notSampled.Tracer("test").Start(context.Background(), "call")
	defer span.End()
	client := &http.Client{Transport: fastTransport(h)}
	for _, ctx := range []context.Context{context.Background(), ctx} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("got %v, want a response", err)
		}
		resp.Body.Close()
	}
	if n := len(h.spans.Ended()); n != 0 {
		t.Errorf("spans: got %d, want none recorded", n)
	}
	if got := h.metrics(); len(got) == 0 {
		t.Error("metrics: got none, want the attempts recorded")
	}
}

// throttledError returns the error of a call that a Transport's throttle
// refused: the dependency (a base that answers 503) rejected every call.
func throttledError(t *testing.T) error {
	t.Helper()
	tr := &retryfuse.Transport{Base: unavailable{}, Retry: retryfuse.RetryPolicy{MaxAttempts: 1, Budget: budget.Unlimited()},
		Load: retryfuse.LoadPolicy{Throttle: retryfuse.ThrottlePolicy{On: true}}}
	for range 1000 {
		req, err := http.NewRequest(http.MethodGet, "http://x/", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			continue
		}
		if retryfuse.ReasonName(err) == "throttled" {
			return err
		}
	}
	t.Fatal("the throttle never refused a call to a dependency that rejects every one")
	return nil
}

// unavailable answers every request 503 at once.
type unavailable struct{}

func (unavailable) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
		Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}
