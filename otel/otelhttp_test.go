package retryfuseotel_test

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func eventNames(span sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range span.Events() {
		out = append(out, e.Name)
	}
	return out
}

// otelhttp above the Transport: one client span for the call, with
// retryfuse's events and the resend count on it.
func TestOtelhttpAboveTransport(t *testing.T) {
	h := newHarness(t)
	srv := statusSequence(t, http.StatusServiceUnavailable)
	client := &http.Client{Transport: otelhttp.NewTransport(fastTransport(h), otelhttp.WithTracerProvider(h.tp))}
	resp, err := client.Get(srv.URL)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("got %v, %v; want 200, nil", resp, err)
	}
	resp.Body.Close()

	spans := h.spans.Ended()
	if len(spans) != 1 || spans[0].SpanKind() != trace.SpanKindClient {
		t.Fatalf("spans: got %d, want one client span", len(spans))
	}
	assertEvents(t, eventNames(spans[0]), []string{
		"retryfuse.attempt", "retryfuse.decision", "retryfuse.retry", "retryfuse.attempt",
	})
	if n, ok := resendCount(spans[0]); !ok || n != 1 {
		t.Errorf("http.request.resend_count: got %d (set %v), want 1", n, ok)
	}
}

// otelhttp as the base: one client span per attempt. otelhttp passes the
// request's context on, with the Transport's httptrace in it, so a refused
// connection is known to be pre-write and a keyed POST is retried instead
// of ending with a reconcile error.
func TestOtelhttpAsBase(t *testing.T) {
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connections to addr are refused: nothing is written
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr := fastTransport(h)
	tr.Base = otelhttp.NewTransport(base, otelhttp.WithTracerProvider(h.tp), otelhttp.WithPropagators(propagation.TraceContext{}))
	tr.Retry.MaxAttempts = 2

	_, _, err = h.call(tr, http.MethodPost, "http://"+addr+"/orders", "order-7")
	if !errors.Is(err, retryfuse.ErrAttemptsExhausted) {
		t.Fatalf("got %v, want ErrAttemptsExhausted (a pre-write failure is retried)", err)
	}
	assertLines(t, "attempts", filterPrefix(h.metrics(), "retryfuse.attempts{"), []string{
		"retryfuse.attempts{http.request.method=POST,retryfuse.outcome=failure,retryfuse.phase=pre_write} 2",
	})
	var attempts int
	for _, s := range h.spans.Ended() {
		if s.SpanKind() == trace.SpanKindClient {
			attempts++
		}
	}
	if attempts != 2 {
		t.Errorf("client spans: got %d, want one per attempt, 2", attempts)
	}
}

func filterPrefix(lines []string, prefix string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
