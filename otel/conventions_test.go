package retryfuseotel_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	retryfuseotel "github.com/retryfuse/retryfuse/otel"
	"github.com/retryfuse/retryfuse/retryfusetest"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// conventionsClient is the composition the package recommends: otelhttp
// as the retryfuse Transport's base, NewTransport above it.
func conventionsClient(t *testing.T, h *harness, rf *retryfuse.Transport, opts ...retryfuseotel.Option) *http.Client {
	t.Helper()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	rf.Base = otelhttp.NewTransport(base, otelhttp.WithPropagators(propagation.TraceContext{}))
	return &http.Client{Transport: retryfuseotel.NewTransport(rf, append([]retryfuseotel.Option{retryfuseotel.WithTracerProvider(h.tp)}, opts...)...)}
}

// spansOfKind returns the ended spans of kind k, in the order they started.
func spansOfKind(h *harness, k trace.SpanKind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range h.spans.Ended() {
		if s.SpanKind() == k {
			out = append(out, s)
		}
	}
	for i := 1; i < len(out); i++ { // insertion sort by start time: a handful
		for j := i; j > 0 && out[j].StartTime().Before(out[j-1].StartTime()); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.Emit(), true
		}
	}
	return "", false
}

// A GET answered 503, 503, 200: three CLIENT spans, one per request sent,
// each with the HTTP attributes and its own trace context on the wire, the
// resends counted 1 and 2; each attempt's result on its own span; the
// call's span INTERNAL, with no attribute at all, holding the decisions.
func TestConventionsGETResentTwiceIsThreeClientSpans(t *testing.T) {
	h := newHarness(t)
	var (
		mu      sync.Mutex
		parents []string
	)
	statuses := []int{http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusOK}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("Traceparent"))
		i := len(parents) - 1
		mu.Unlock()
		w.WriteHeader(statuses[min(i, len(statuses)-1)])
		io.WriteString(w, "body")
	}))
	t.Cleanup(srv.Close)
	client := conventionsClient(t, h, fastTransport(h))

	resp, err := client.Get(srv.URL + "/invoices/7")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("got %v, %v; want 200, nil", resp, err)
	}
	if n := len(spansOfKind(h, trace.SpanKindInternal)); n != 0 {
		t.Errorf("call spans ended before the body was closed: got %d, want 0", n)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	calls := spansOfKind(h, trace.SpanKindInternal)
	if len(calls) != 1 {
		t.Fatalf("INTERNAL spans: got %d, want 1 for the call", len(calls))
	}
	call := calls[0]
	if got := call.Attributes(); len(got) != 0 {
		t.Errorf("call span attributes: got %v, want none", got)
	}
	if call.Name() != "GET" {
		t.Errorf("call span name: got %q, want GET", call.Name())
	}
	assertEvents(t, eventNames(call), []string{
		"retryfuse.decision", "retryfuse.retry", "retryfuse.decision", "retryfuse.retry",
	})

	sent := spansOfKind(h, trace.SpanKindClient)
	if len(sent) != 3 {
		t.Fatalf("CLIENT spans: got %d, want 3, one per request sent", len(sent))
	}
	wantStatus := []string{"503", "503", "200"}
	for i, s := range sent {
		if s.Parent().SpanID() != call.SpanContext().SpanID() {
			t.Errorf("request %d: parent %v, want the call's span %v", i+1, s.Parent().SpanID(), call.SpanContext().SpanID())
		}
		if m, _ := attr(s, "http.request.method"); m != "GET" {
			t.Errorf("request %d: http.request.method = %q, want GET", i+1, m)
		}
		if u, _ := attr(s, "url.full"); !strings.HasSuffix(u, "/invoices/7") {
			t.Errorf("request %d: url.full = %q, want the request's URL", i+1, u)
		}
		if c, _ := attr(s, "http.response.status_code"); c != wantStatus[i] {
			t.Errorf("request %d: http.response.status_code = %q, want %s", i+1, c, wantStatus[i])
		}
		n, ok := resendCount(s)
		switch {
		case i == 0 && ok:
			t.Errorf("request 1: http.request.resend_count = %d, want it absent", n)
		case i > 0 && (!ok || n != int64(i)):
			t.Errorf("request %d: http.request.resend_count = %d (set %v), want %d", i+1, n, ok, i)
		}
		outcome := map[bool]string{true: "success", false: "failure"}[i == 2]
		assertEvents(t, events(t, s), []string{
			"retryfuse.attempt{http.response.status_code=" + wantStatus[i] + ",retryfuse.attempt.duration=*,retryfuse.attempt.number=" +
				string(rune('1'+i)) + ",retryfuse.outcome=" + outcome + ",retryfuse.phase=post_write,retryfuse.retryable=" +
				map[bool]string{true: "false", false: "true"}[i == 2] + "}",
		})
		wire := "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
		if parents[i] != wire {
			t.Errorf("request %d: traceparent %q, want its own span's %q", i+1, parents[i], wire)
		}
	}
}

// A keyed POST whose connection closes after the request was read ends in
// *ReconcileRequiredError: the call's span records the error, with the
// verdict and the reconcile event; the attempt's span its own outcome,
// though otelhttp ended it before retryfuse classified it.
func TestConventionsKeyedPOSTReconcileOnTheCallSpan(t *testing.T) {
	h := newHarness(t)
	// The body is read (the Recorder reads it), and the connection closed
	// with no answer.
	srv := retryfusetest.NewServer(t, retryfusetest.NewRecorder().Wrap(nil), retryfusetest.ApplyThenClose())
	client := conventionsClient(t, h, fastTransport(h), retryfuseotel.WithSpanName(func(*http.Request) string { return "CreateOrder" }))
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"sku":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "order-42")

	_, err = client.Do(req)
	var rre *retryfuse.ReconcileRequiredError
	if !errors.As(err, &rre) {
		t.Fatalf("got %v, want a *ReconcileRequiredError", err)
	}

	calls := spansOfKind(h, trace.SpanKindInternal)
	if len(calls) != 1 {
		t.Fatalf("INTERNAL spans: got %d, want 1", len(calls))
	}
	call := calls[0]
	if call.Name() != "CreateOrder" || len(call.Attributes()) != 0 {
		t.Errorf("call span: got %q with %v, want CreateOrder with no attributes", call.Name(), call.Attributes())
	}
	if call.Status().Code != codes.Error {
		t.Errorf("call span status: got %v, want Error", call.Status())
	}
	assertEvents(t, eventNames(call), []string{"retryfuse.decision", "retryfuse.reconcile_required", "exception"})

	sent := spansOfKind(h, trace.SpanKindClient)
	if len(sent) != 1 {
		t.Fatalf("CLIENT spans: got %d, want 1", len(sent))
	}
	s := sent[0]
	if m, _ := attr(s, "http.request.method"); m != "POST" {
		t.Errorf("http.request.method = %q, want POST", m)
	}
	if _, ok := resendCount(s); ok {
		t.Error("http.request.resend_count set on the only request, want it absent")
	}
	if s.Status().Code != codes.Error {
		t.Errorf("attempt span status: got %v, want Error", s.Status())
	}
	assertEvents(t, events(t, s), []string{
		"retryfuse.attempt{retryfuse.attempt.duration=*,retryfuse.attempt.number=1,retryfuse.outcome=unknown,retryfuse.phase=post_write,retryfuse.retryable=true}",
	})
	if len(s.Events()) == 0 {
		t.FailNow()
	}
	if e := s.Events()[0]; e.Time.After(s.EndTime()) {
		t.Errorf("attempt event at %v, after its span's end %v", e.Time, s.EndTime())
	}
}

// A redirect that http.Client follows is a resend too: the call it makes
// counts its requests on from the redirected call's.
func TestConventionsRedirectCountsAsResend(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusTemporaryRedirect)
			return
		}
		mu.Lock()
		hits++
		first := hits == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	client := conventionsClient(t, h, fastTransport(h))

	resp, err := client.Get(srv.URL + "/old")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("got %v, %v; want 200, nil", resp, err)
	}
	resp.Body.Close()

	if n := len(spansOfKind(h, trace.SpanKindInternal)); n != 2 {
		t.Errorf("INTERNAL spans: got %d, want 2 (one per call http.Client made)", n)
	}
	var got []int64
	for _, s := range spansOfKind(h, trace.SpanKindClient) {
		n, ok := resendCount(s)
		if !ok {
			n = -1
		}
		got = append(got, n)
	}
	if want := []int64{-1, 1, 2}; !equalInts(got, want) {
		t.Errorf("resend counts by request (-1: absent): got %v, want %v", got, want)
	}
}

// Without NewHooks, the resends are still counted and every span ends.
func TestConventionsResendCountWithoutHooks(t *testing.T) {
	h := newHarness(t)
	srv := statusSequence(t, http.StatusServiceUnavailable)
	rf := fastTransport(h)
	rf.Hooks = retryfuse.Hooks{}
	resp, err := conventionsClient(t, h, rf).Get(srv.URL)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("got %v, %v; want 200, nil", resp, err)
	}
	resp.Body.Close()
	sent := spansOfKind(h, trace.SpanKindClient)
	if len(sent) != 2 {
		t.Fatalf("CLIENT spans: got %d, want 2", len(sent))
	}
	if n, ok := resendCount(sent[1]); !ok || n != 1 {
		t.Errorf("second request: http.request.resend_count = %d (set %v), want 1", n, ok)
	}
	if n := len(spansOfKind(h, trace.SpanKindInternal)); n != 1 {
		t.Errorf("INTERNAL spans: got %d, want 1", n)
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A hedged GET: the branch that hangs and the hedge that answers are two
// requests sent, each a CLIENT span with its own result; the hedge is a
// resend. The lost branch's span, which otelhttp ended as it was
// cancelled, carries its result too.
func TestConventionsHedgeIsAResend(t *testing.T) {
	h := newHarness(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request sent first hangs, whichever reaches the server
		// first (on a loaded machine the hedge may): the hedge answers.
		if sentFirst(t, h, r) {
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	rf := fastTransport(h)
	rf.Hedge = retryfuse.HedgePolicy{Max: 1, Delay: 20 * time.Millisecond}
	resp, err := conventionsClient(t, h, rf).Get(srv.URL)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("got %v, %v; want 200, nil", resp, err)
	}
	resp.Body.Close()

	sent := spansOfKind(h, trace.SpanKindClient)
	if len(sent) != 2 {
		t.Fatalf("CLIENT spans: got %d, want 2", len(sent))
	}
	if n, ok := resendCount(sent[0]); ok {
		t.Errorf("first request: http.request.resend_count = %d, want it absent", n)
	}
	if n, ok := resendCount(sent[1]); !ok || n != 1 {
		t.Errorf("hedge: http.request.resend_count = %d (set %v), want 1", n, ok)
	}
	assertEvents(t, events(t, sent[0]), []string{
		"retryfuse.attempt{retryfuse.attempt.duration=*,retryfuse.attempt.number=1,retryfuse.outcome=unknown,retryfuse.phase=post_write,retryfuse.retryable=false}",
	})
	assertEvents(t, events(t, sent[1]), []string{
		"retryfuse.attempt{http.response.status_code=200,retryfuse.attempt.branch=1,retryfuse.attempt.duration=*,retryfuse.attempt.number=2,retryfuse.outcome=success,retryfuse.phase=post_write,retryfuse.retryable=false}",
	})
	calls := spansOfKind(h, trace.SpanKindInternal)
	if len(calls) != 1 {
		t.Fatalf("INTERNAL spans: got %d, want 1", len(calls))
	}
	assertEvents(t, eventNames(calls[0]), []string{"retryfuse.policy"})
}

// sentFirst reports whether r is the request of its call's first CLIENT
// span (the one without a resend count), found among the spans started
// by the span id its traceparent carries.
func sentFirst(t *testing.T, h *harness, r *http.Request) bool {
	parts := strings.Split(r.Header.Get("Traceparent"), "-")
	if len(parts) != 4 {
		t.Errorf("request without a traceparent: %q", r.Header.Get("Traceparent"))
		return false
	}
	for _, s := range h.spans.Started() {
		if s.SpanContext().SpanID().String() == parts[2] {
			_, resent := resendCount(s)
			return !resent
		}
	}
	t.Errorf("traceparent %q: no span started with its id", r.Header.Get("Traceparent"))
	return false
}

// A call the open breaker refuses sends nothing: no CLIENT span, and the
// refusal on the call's span, which records the error.
func TestConventionsBreakerRefusalOnTheCallSpan(t *testing.T) {
	h := newHarness(t)
	srv := statusSequence(t, http.StatusServiceUnavailable)
	b, err := breaker.New(breaker.Settings{FailureThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	rf := fastTransport(h)
	rf.Brake.Breaker = b
	rf.Retry.MaxAttempts = 1
	client := conventionsClient(t, h, rf)
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("first call: %v, want its 503", err)
	}
	resp.Body.Close()
	before := len(spansOfKind(h, trace.SpanKindClient))

	_, err = client.Get(srv.URL)
	if !errors.Is(err, retryfuse.ErrCircuitOpen) {
		t.Fatalf("second call: got %v, want ErrCircuitOpen", err)
	}
	if n := len(spansOfKind(h, trace.SpanKindClient)); n != before {
		t.Errorf("CLIENT spans after the refusal: got %d, want %d (nothing sent)", n, before)
	}
	calls := spansOfKind(h, trace.SpanKindInternal)
	if len(calls) != 2 {
		t.Fatalf("INTERNAL spans: got %d, want 2", len(calls))
	}
	refused := calls[1]
	assertEvents(t, eventNames(refused), []string{"retryfuse.give_up", "exception"})
	if got := events(t, refused); len(got) > 0 {
		assertEvents(t, got[:1], []string{"retryfuse.give_up{retryfuse.attempt.number=0,retryfuse.reason=circuit_open}"})
	}
	if refused.Status().Code != codes.Error || len(refused.Attributes()) != 0 {
		t.Errorf("refused call span: status %v, attributes %v; want Error, none", refused.Status(), refused.Attributes())
	}
}

type closeCounter struct {
	http.RoundTripper
	closed int
}

func (c *closeCounter) CloseIdleConnections() { c.closed++ }

// NewTransport forwards CloseIdleConnections, and a nil RoundTripper
// fails the call instead of panicking.
func TestNewTransportCloseIdleAndNilNext(t *testing.T) {
	next := &closeCounter{}
	(&http.Client{Transport: retryfuseotel.NewTransport(next)}).CloseIdleConnections()
	if next.closed != 1 {
		t.Errorf("CloseIdleConnections reached next %d times, want 1", next.closed)
	}
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	resp, err := (&http.Client{Transport: retryfuseotel.NewTransport(nil)}).Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Error("a nil RoundTripper answered; want an error")
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("requests sent: got %d, want 0", n)
	}
}
