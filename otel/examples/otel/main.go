// Command otel shows retryfuse's OpenTelemetry metrics and span events
// for three calls against a local server: a GET retried once after a 503,
// a keyed POST that times out after it was written (reconcile required),
// and a GET refused until its attempts run out.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	retryfuseotel "github.com/retryfuse/retryfuse/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func main() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	hooks, err := retryfuseotel.NewHooks(retryfuseotel.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	rf := &retryfuse.Transport{
		Hooks:          hooks,
		InitialBackoff: 10 * time.Millisecond,
		MaxBackoff:     50 * time.Millisecond,
		AttemptTimeout: 200 * time.Millisecond,
	}
	// In a service: otelhttp.NewTransport(retryfuseotel.Wrap(rf)), so that
	// the span Wrap writes to is otelhttp's span of the call.
	client := &http.Client{Transport: retryfuseotel.Wrap(rf)}

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

	refused := closedAddr()
	calls := []struct{ method, url, key string }{
		{http.MethodGet, srv.URL + "/items", ""},
		{http.MethodPost, srv.URL + "/orders", "order-42"},
		{http.MethodGet, "http://" + refused + "/", ""},
	}
	for _, c := range calls {
		ctx, span := tp.Tracer("example").Start(context.Background(), c.method+" "+c.url)
		req, _ := http.NewRequestWithContext(ctx, c.method, c.url, nil)
		if c.key != "" {
			req.Header.Set(retryfuse.HeaderIdempotencyKey, c.key)
		}
		resp, err := client.Do(req)
		switch {
		case errors.Is(err, retryfuse.ErrReconcileRequired):
			fmt.Printf("%s %s: reconcile required\n", c.method, c.url)
		case err != nil:
			fmt.Printf("%s %s: %v\n", c.method, c.url, err)
		default:
			resp.Body.Close()
			fmt.Printf("%s %s: %s\n", c.method, c.url, resp.Status)
		}
		span.End()
	}

	fmt.Println("\nspans:")
	for _, s := range spans.Ended() {
		fmt.Printf("  %s\n", s.Name())
		if a := s.Attributes(); len(a) > 0 {
			fmt.Printf("    %s\n", attrs(a))
		}
		for _, e := range s.Events() {
			fmt.Printf("    event %s %s\n", e.Name, attrs(e.Attributes))
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	fmt.Println("\nmetrics:")
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			fmt.Printf("  %s (%s)\n", m.Name, m.Unit)
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					fmt.Printf("    %s %d\n", attrs(dp.Attributes.ToSlice()), dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					fmt.Printf("    %s count=%d sum=%.3f\n", attrs(dp.Attributes.ToSlice()), dp.Count, dp.Sum)
				}
			}
		}
	}
}

func attrs(kvs []attribute.KeyValue) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = string(kv.Key) + "=" + kv.Value.Emit()
	}
	return strings.Join(parts, " ")
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
