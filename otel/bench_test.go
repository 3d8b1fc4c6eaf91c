package retryfuseotel_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/retryfuse/retryfuse"
	retryfuseotel "github.com/retryfuse/retryfuse/otel"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkTracedGET compares a GET answered 200 on loopback through a
// retryfuse Transport: untraced; under otelhttp above it (a span per
// call); and under NewTransport over otelhttp as its base (a call span
// and a request span).
func BenchmarkTracedGET(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	hooks, err := retryfuseotel.NewHooks()
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name   string
		client func(base *http.Transport, tp *sdktrace.TracerProvider) *http.Client
	}{
		{"untraced", func(base *http.Transport, _ *sdktrace.TracerProvider) *http.Client {
			return &http.Client{Transport: &retryfuse.Transport{Base: base, Hooks: hooks}}
		}},
		{"otelhttp_above", func(base *http.Transport, tp *sdktrace.TracerProvider) *http.Client {
			rf := &retryfuse.Transport{Base: base, Hooks: hooks}
			return &http.Client{Transport: otelhttp.NewTransport(rf, otelhttp.WithTracerProvider(tp))}
		}},
		{"NewTransport", func(base *http.Transport, tp *sdktrace.TracerProvider) *http.Client {
			rf := &retryfuse.Transport{Base: otelhttp.NewTransport(base), Hooks: hooks}
			return &http.Client{Transport: retryfuseotel.NewTransport(rf, retryfuseotel.WithTracerProvider(tp))}
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			spans := tracetest.NewSpanRecorder()
			client := c.client(base, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
