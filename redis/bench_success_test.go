package retryfuseredis

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
)

// BenchmarkSuccessPath is a GET through a retryfuse.Transport to a healthy
// loopback server, with an in-memory ratio budget per scope and with the
// Redis one, interleaved: each iteration makes one call through each
// Transport, the two in turn first, and times each. It reports ns/op of
// each (memory-ns/call, redis-ns/call) and their ratio (redis/memory), so
// that a busy machine slows both alike. The parallel variant is several
// callers, each interleaving the same way.
func BenchmarkSuccessPath(b *testing.B) {
	benchSuccess(b, false)
}

func BenchmarkSuccessPathParallel(b *testing.B) {
	benchSuccess(b, true)
}

func benchSuccess(b *testing.B, parallel bool) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	b.Cleanup(srv.Close)
	f, err := RatioBudgets(sharedClient(b), budget.RatioConfig{}, BudgetOptions{Prefix: uniq(b), Timeout: benchTimeout})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close(bg()) })
	memory := newGetter(b, srv.URL, func(string) (budget.Budget, error) {
		return budget.NewRatio(budget.RatioConfig{})
	})
	redisBudget := newGetter(b, srv.URL, f.New)
	var memNs, redisNs atomic.Int64
	pair := func(i int) {
		first, second := memory, redisBudget
		firstNs, secondNs := &memNs, &redisNs
		if i%2 == 1 {
			first, second, firstNs, secondNs = second, first, secondNs, firstNs
		}
		firstNs.Add(int64(first.get(b)))
		secondNs.Add(int64(second.get(b)))
	}
	b.ReportAllocs()
	var calls atomic.Int64
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				pair(i)
				i++
			}
			calls.Add(int64(i))
		})
	} else {
		i := 0
		for b.Loop() {
			pair(i)
			i++
		}
		calls.Store(int64(i))
	}
	n := float64(max(calls.Load(), 1))
	b.ReportMetric(float64(memNs.Load())/n, "memory-ns/call")
	b.ReportMetric(float64(redisNs.Load())/n, "redis-ns/call")
	b.ReportMetric(float64(redisNs.Load())/float64(max(memNs.Load(), 1)), "redis/memory")
}

// getter makes GETs through its own Transport.
type getter struct {
	c   *http.Client
	url string
}

func newGetter(b *testing.B, url string, newBudget func(string) (budget.Budget, error)) *getter {
	tr := &retryfuse.Transport{Retry: retryfuse.RetryPolicy{NewBudget: newBudget}}
	b.Cleanup(tr.CloseIdleConnections)
	return &getter{c: &http.Client{Transport: tr}, url: url}
}

// get makes one GET and returns how long it took.
func (g *getter) get(b *testing.B) time.Duration {
	start := time.Now()
	resp, err := g.c.Get(g.url)
	if err != nil {
		b.Error(err)
		return time.Since(start)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start)
}
