package retryfuseotel_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	retryfuseotel "github.com/retryfuse/retryfuse/otel"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A GET answered 503, 503, 200: an INTERNAL span for the call, with no
// attributes and the call's decisions, and a CLIENT span (otelhttp's) for
// each request sent, with its result and, on each resend, its resend count.
func ExampleNewTransport() {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	hooks, err := retryfuseotel.NewHooks()
	if err != nil {
		panic(err)
	}
	base := &http.Transport{}
	rf := &retryfuse.Transport{
		Base:  otelhttp.NewTransport(base), // a CLIENT span per request sent
		Hooks: hooks,
		Retry: retryfuse.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
	}
	client := &http.Client{Transport: retryfuseotel.NewTransport(rf, retryfuseotel.WithTracerProvider(tp))}
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	ended := spans.Ended()
	slices.SortStableFunc(ended, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	for _, s := range ended {
		var line []string
		for _, a := range s.Attributes() {
			switch a.Key {
			case "http.response.status_code", "http.request.resend_count":
				line = append(line, string(a.Key)+"="+a.Value.Emit())
			}
		}
		for _, e := range s.Events() {
			line = append(line, e.Name)
		}
		if len(s.Attributes()) == 0 {
			line = append([]string{"(no attributes)"}, line...)
		}
		fmt.Printf("%s %q: %s\n", s.SpanKind(), s.Name(), strings.Join(line, " "))
	}
	// Output:
	// internal "GET": (no attributes) retryfuse.decision retryfuse.retry retryfuse.decision retryfuse.retry
	// client "HTTP GET": http.response.status_code=503 retryfuse.attempt
	// client "HTTP GET": http.request.resend_count=1 http.response.status_code=503 retryfuse.attempt
	// client "HTTP GET": http.request.resend_count=2 http.response.status_code=200 retryfuse.attempt
}
