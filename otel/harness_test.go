package retryfuseotel_test

import (
	"context"
	"fmt"
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

// call sends one request through tr inside a span and returns the ended
// span.
func (h *harness) call(tr *retryfuse.Transport, method, url, key string) (sdktrace.ReadOnlySpan, *http.Response, error) {
	h.t.Helper()
	ctx, span := h.tp.Tracer("test").Start(context.Background(), "call")
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	client := &http.Client{Transport: tr}
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

// events renders a span's events as "name{k=v,...}" in order, attributes
// sorted. Durations measured on the clock (an attempt's, a jittered delay)
// show as "*" once checked to be seconds, not negative.
// assertEvents compares events in the order they were added.
func assertEvents(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("span events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

func events(t *testing.T, span sdktrace.ReadOnlySpan) []string {
	t.Helper()
	var out []string
	for _, e := range span.Events() {
		var kv []string
		for _, a := range e.Attributes {
			v := a.Value.Emit()
			switch a.Key {
			case "retryfuse.attempt.duration", "retryfuse.delay.duration":
				if a.Value.Type() != attribute.FLOAT64 || a.Value.AsFloat64() < 0 || a.Value.AsFloat64() > 10 {
					t.Errorf("event %s: %s = %v, want seconds in [0, 10]", e.Name, a.Key, a.Value.Emit())
				}
				v = "*"
			}
			kv = append(kv, string(a.Key)+"="+v)
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
	return &retryfuse.Transport{Hooks: h.hooks, Retry: retryfuse.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}
}
