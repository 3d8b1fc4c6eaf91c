package retryfuseotel_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	retryfuseotel "github.com/retryfuse/retryfuse/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// harness records the metrics of NewHooks and the spans of a test.
type harness struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	hooks  retryfuse.Hooks
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	var err error
	h.hooks, err = retryfuseotel.NewHooks(retryfuseotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// call sends one request through Wrap(tr) inside a span and returns the
// ended span.
func (h *harness) call(tr *retryfuse.Transport, method, url, key string) (sdktrace.ReadOnlySpan, *http.Response, error) {
	h.t.Helper()
	ctx, span := h.tp.Tracer("test").Start(context.Background(), "call")
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(retryfuse.HeaderIdempotencyKey, key)
	}
	client := &http.Client{Transport: retryfuseotel.Wrap(tr)}
	resp, err := client.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	span.End()
	ended := h.spans.Ended()
	return ended[len(ended)-1], resp, err
}

// metrics renders every recorded data point as "name{k=v,...} value",
// sorted; a histogram's value is its count.
func (h *harness) metrics() []string {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	var out []string
	point := func(name string, attrs attribute.Set, v string) {
		var kv []string
		for _, a := range attrs.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		out = append(out, name+"{"+strings.Join(kv, ",")+"} "+v)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					point(m.Name, dp.Attributes, fmt.Sprint(dp.Value))
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					point(m.Name, dp.Attributes, fmt.Sprint(dp.Value))
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					point(m.Name, dp.Attributes, fmt.Sprintf("count=%d", dp.Count))
				}
			default:
				h.t.Fatalf("metric %s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	slices.Sort(out)
	return out
}

func assertLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %s\nwant %s", what, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

func events(span sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range span.Events() {
		var kv []string
		for _, a := range e.Attributes {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		slices.Sort(kv)
		out = append(out, e.Name+"{"+strings.Join(kv, ",")+"}")
	}
	return out
}

func resendCount(span sdktrace.ReadOnlySpan) (int64, bool) {
	for _, a := range span.Attributes() {
		if a.Key == "http.request.resend_count" {
			return a.Value.AsInt64(), true
		}
	}
	return 0, false
}

func statusSequence(t *testing.T, statuses ...int) *httptest.Server {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if i := int(n.Add(1)) - 1; i < len(statuses) {
			w.WriteHeader(statuses[i])
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func fastTransport(h *harness) *retryfuse.Transport {
	return &retryfuse.Transport{Hooks: h.hooks, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
}

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
		"retryfuse.attempts{http.request.method=GET,http.response.status_code=503,retryfuse.outcome=failure,retryfuse.phase=response} 1",
		"retryfuse.attempts{http.request.method=GET,http.response.status_code=200,retryfuse.outcome=success,retryfuse.phase=response} 1",
		"retryfuse.retries{http.request.method=GET,retryfuse.delay.source=backoff} 1",
		"retryfuse.retry.delay{http.request.method=GET,retryfuse.delay.source=backoff} count=1",
	})
	// A call that returns a response shows nothing on the span: its
	// attempts are not visible from outside RoundTrip (see README.md).
	if ev := events(span); len(ev) != 0 {
		t.Errorf("span events: got %v, want none", ev)
	}
	if n, ok := resendCount(span); ok {
		t.Errorf("http.request.resend_count: got %d, want unset", n)
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
	tr.AttemptTimeout = 50 * time.Millisecond

	span, _, err := h.call(tr, http.MethodPost, srv.URL+"/orders", "order-42")
	if !errors.Is(err, retryfuse.ErrReconcileRequired) {
		t.Fatalf("got %v, want ErrReconcileRequired", err)
	}
	assertLines(t, "metrics", h.metrics(), []string{
		"retryfuse.attempt.duration{http.request.method=POST,retryfuse.outcome=timeout} count=1",
		"retryfuse.attempts{http.request.method=POST,retryfuse.outcome=timeout,retryfuse.phase=post_write} 1",
		"retryfuse.reconcile_required{http.request.method=POST,retryfuse.idempotency_key.source=carried,retryfuse.phase=post_write} 1",
	})
	assertLines(t, "span events", events(span), []string{
		"retryfuse.reconcile_required{http.request.method=POST,retryfuse.attempts=1,retryfuse.idempotency_key.source=carried,retryfuse.idempotency_key=order-42,retryfuse.phase=post_write}",
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
		"retryfuse.attempts{http.request.method=POST,http.response.status_code=503,retryfuse.outcome=failure,retryfuse.phase=response} 1",
		"retryfuse.brakes{http.request.method=POST,retryfuse.decision=brake,retryfuse.evidence=pass,retryfuse.rule=5} 1",
		"retryfuse.give_ups{http.request.method=POST,retryfuse.reason=not_repeatable} 1",
	})
	if ev := events(span); len(ev) != 0 {
		t.Errorf("span events: got %v, want none (a response)", ev)
	}
}

// A GET whose every attempt is refused gives up with an error: the span
// gets the give-up event and the resend count.
func TestGETAttemptsExhausted(t *testing.T) {
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connections to addr are refused: nothing is written
	tr := fastTransport(h)
	tr.MaxAttempts = 2

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
	assertLines(t, "span events", events(span), []string{
		"retryfuse.give_up{http.request.method=GET,retryfuse.attempts=2,retryfuse.reason=attempts_exhausted}",
	})
	if n, ok := resendCount(span); !ok || n != 1 {
		t.Errorf("http.request.resend_count: got %d (set %v), want 1", n, ok)
	}
}

// Events the transport cannot yet produce on loopback are fed directly.
func TestHooksDirectEvents(t *testing.T) {
	h := newHarness(t)
	ci := retryfuse.CallInfo{CallID: 1, Attempt: 1, Method: "PURGE", URL: "http://x/"}
	h.hooks.HiddenResend(retryfuse.HiddenResendInfo{CallInfo: ci, Connections: 3})
	h.hooks.EvidenceUnavailable(retryfuse.EvidenceUnavailableInfo{CallInfo: ci, Source: "ledger", Err: errors.New("down")})
	h.hooks.GiveUp(retryfuse.GiveUpInfo{CallInfo: ci, Reason: retryfuse.ErrBudgetExhausted})
	h.hooks.GiveUp(retryfuse.GiveUpInfo{CallInfo: ci, Reason: errors.New("something new")})
	h.hooks.Decision(retryfuse.DecisionInfo{CallInfo: ci, Verdict: retryfuse.Verdict{Decision: retryfuse.ReplaySafe, Evidence: retryfuse.EvidencePass, Rule: 8}})
	h.hooks.Decision(retryfuse.DecisionInfo{CallInfo: ci, Verdict: retryfuse.Verdict{Decision: retryfuse.Brake, Evidence: retryfuse.EvidenceFail, Rule: 6}})
	assertLines(t, "metrics", h.metrics(), []string{
		"retryfuse.hidden_resends{http.request.method=_OTHER} 2",
		"retryfuse.evidence_unavailable{http.request.method=_OTHER,retryfuse.source=ledger} 1",
		"retryfuse.give_ups{http.request.method=_OTHER,retryfuse.reason=budget_exhausted} 1",
		"retryfuse.give_ups{http.request.method=_OTHER,retryfuse.reason=_OTHER} 1",
		"retryfuse.budget.refusals{http.request.method=_OTHER} 1",
		"retryfuse.brakes{http.request.method=_OTHER,retryfuse.decision=brake,retryfuse.evidence=fail,retryfuse.rule=6} 1",
	})
}

func stateNamed(name string) (retryfuse.BreakerState, bool) {
	for i := range 256 {
		if s := retryfuse.BreakerState(i); fmt.Sprint(s) == name {
			return s, true
		}
	}
	return 0, false
}

func TestHooksBreakerChange(t *testing.T) {
	closed, ok1 := stateNamed("closed")
	open, ok2 := stateNamed("open")
	half, ok3 := stateNamed("half_open")
	if !ok1 || !ok2 || !ok3 {
		t.Skip("BreakerState has no closed, open and half_open names yet")
	}
	h := newHarness(t)
	change := func(from, to retryfuse.BreakerState) {
		h.hooks.BreakerChange(retryfuse.BreakerChangeInfo{BreakerTransition: retryfuse.BreakerTransition{Scope: "api:443", From: from, To: to}})
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
	h.hooks.AttemptDone(retryfuse.AttemptDoneInfo{CallInfo: ci, Outcome: retryfuse.OutcomeSuccess})
	h.hooks.Retry(retryfuse.RetryInfo{CallInfo: ci, Delay: 1500 * time.Millisecond, Source: retryfuse.DelayRetryAfter})
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

// Without a recording span, Wrap only passes the call through.
func TestWrapWithoutSpan(t *testing.T) {
	srv := statusSequence(t)
	client := &http.Client{Transport: retryfuseotel.Wrap(&retryfuse.Transport{})}
	resp, err := client.Get(srv.URL)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("got %v, %v; want 200, nil", resp, err)
	}
	resp.Body.Close()
}
