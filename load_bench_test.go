package retryfuse

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
)

// BenchmarkLoadMixed sends a healthy mix through one Transport, from
// parallel goroutines, against the fault server: GET, PUT and keyed POST in
// turn, one call in ten meeting a 503 (Retry-After: 0) once and retried.
// It reports calls per second.
func BenchmarkLoadMixed(b *testing.B) {
	srv := newFaultServer(b, time.Second)
	budget, err := budget.NewRatio(budget.RatioConfig{Ratio: 0.2})
	if err != nil {
		b.Fatal(err)
	}
	tr := &Transport{
		Retry: RetryPolicy{
			InitialBackoff: 5 * time.Millisecond,
			MaxBackoff:     50 * time.Millisecond,
			AttemptTimeout: 200 * time.Millisecond,
			Budget:         budget,
		},
		Brake: BrakePolicy{
			Breaker: &breaker.Breaker{},
		},
	}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	ctx := context.Background()
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := seq.Add(1)
			lc := faultCall{name: fmt.Sprintf("m%d", i)}
			switch i % 3 {
			case 0:
				lc.method = http.MethodGet
			case 1:
				lc.method = http.MethodPut
			default:
				lc.method = http.MethodPost
				lc.key = lc.name
			}
			if i%10 == 0 {
				lc.fault, lc.times = faultRetryAfter503, 1
			}
			req, err := lc.request(ctx, srv.URL)
			if err != nil {
				b.Error(err)
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("%s %s: status %d, want 200", lc.method, lc.name, resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkAddedLatency sends the same loopback GET through the bare base
// (cleanhttp.DefaultPooledTransport) and through a Transport over it, one
// call at a time, and reports the median and 99th percentile of the
// per-call latency, so that the two can be compared within one run.
func BenchmarkAddedLatency(b *testing.B) {
	srv := newFaultServer(b, time.Second)
	for _, bc := range []struct {
		name string
		rt   func() http.RoundTripper
	}{
		{"base", func() http.RoundTripper { return cleanhttp.DefaultPooledTransport() }},
		{"retryfuse", func() http.RoundTripper { return &Transport{Retry: RetryPolicy{AttemptTimeout: time.Second}} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rt := bc.rt()
			defer rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			client := &http.Client{Transport: rt}
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/latency", nil)
			if err != nil {
				b.Fatal(err)
			}
			durs := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				began := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				durs = append(durs, time.Since(began))
			}
			b.StopTimer()
			slices.Sort(durs)
			b.ReportMetric(float64(percentile(durs, 50).Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(percentile(durs, 99).Nanoseconds()), "p99-ns")
		})
	}
}
