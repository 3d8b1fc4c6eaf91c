// Command otel shows retryfuse's OpenTelemetry metrics and spans for three
// calls against a local server: a GET retried once after a 503, a keyed
// POST that times out after it was written (reconcile required), and a GET
// refused until its attempts run out. Each call is an INTERNAL span
// (retryfuseotel.NewTransport) over a CLIENT span per request sent
// (otelhttp, the retryfuse Transport's base).
//
// Run it from the otel module's directory with:
//
//	go run ./examples/otel
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	retryfuseotel "github.com/retryfuse/retryfuse/otel"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "otel:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	hooks, err := retryfuseotel.NewHooks(retryfuseotel.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	base := &http.Transport{}
	rf := &retryfuse.Transport{
		Base:  otelhttp.NewTransport(base), // a CLIENT span per request sent
		Hooks: hooks,
		Retry: retryfuse.RetryPolicy{
			InitialBackoff: 10 * time.Millisecond,
			MaxBackoff:     50 * time.Millisecond,
			AttemptTimeout: 200 * time.Millisecond,
		},
	}
	// An INTERNAL span per call, whose TracerProvider the otelhttp
	// Transport below takes.
	client := &http.Client{Transport: retryfuseotel.NewTransport(rf, retryfuseotel.WithTracerProvider(tp))}
	defer client.CloseIdleConnections()

	var gets atomic.Int32
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost: // stalls past the attempt timeout
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		case gets.Add(1) == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	}))
	defer srv.Close()
	defer close(stop)

	refused, err := closedAddr()
	if err != nil {
		return err
	}
	calls := []struct{ method, url, key string }{
		{http.MethodGet, srv.URL + "/items", ""},
		{http.MethodPost, srv.URL + "/orders", "order-42"},
		{http.MethodGet, "http://" + refused + "/", ""},
	}
	for _, c := range calls {
		req, err := http.NewRequest(c.method, c.url, nil)
		if err != nil {
			return err
		}
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		resp, err := client.Do(req)
		switch {
		case errors.Is(err, retryfuse.ErrReconcileRequired):
			fmt.Fprintf(w, "%s %s: reconcile required\n", c.method, c.url)
		case err != nil:
			fmt.Fprintf(w, "%s %s: %v\n", c.method, c.url, err)
		default:
			resp.Body.Close()
			fmt.Fprintf(w, "%s %s: %s\n", c.method, c.url, resp.Status)
		}
	}

	fmt.Fprintln(w, "\nspans:")
	for _, s := range spans.Ended() {
		fmt.Fprintf(w, "  %s %s\n", s.SpanKind(), s.Name())
		if a := s.Attributes(); len(a) > 0 {
			fmt.Fprintf(w, "    %s\n", attrs(a))
		}
		for _, e := range s.Events() {
			fmt.Fprintf(w, "    event %s %s\n", e.Name, attrs(e.Attributes))
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nmetrics:")
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			fmt.Fprintf(w, "  %s (%s)\n", m.Name, m.Unit)
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					fmt.Fprintf(w, "    %s %d\n", attrs(dp.Attributes.ToSlice()), dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					fmt.Fprintf(w, "    %s count=%d sum=%.3f\n", attrs(dp.Attributes.ToSlice()), dp.Count, dp.Sum)
				}
			}
		}
	}
	return nil
}

func attrs(kvs []attribute.KeyValue) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = string(kv.Key) + "=" + kv.Value.Emit()
	}
	return strings.Join(parts, " ")
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
