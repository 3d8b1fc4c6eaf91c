package bench

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkGETParallel256 measures the throughput of loopback GETs from
// 256 goroutines sharing one client, bare net/http against retryfuse's
// defaults. The calls go in bursts of burstCalls, each client's bursts
// alternating with the other's (in an order that swaps every burst), so
// that the machine's drift meets both alike; each client's throughput is
// its calls over the time its bursts took. A burst starts 256 goroutines
// that take turns from its count of calls. Both bases keep up to 256 idle
// connections (the pooled default keeps 100, and GOMAXPROCS+1 per host, which would
// make this a benchmark of dialling, whose churn differs from burst to
// burst): after the first burst, calls reuse connections, and
// new-conns/call reports how many did not. Bytes and allocations per call
// are those of the whole process, server included, both clients together.
//
// Each client is there twice, one pair made bare first and the other
// retryfuse first, and each client's figures sum both of its own: of two
// bare clients alike, the one made second measured 2–5% faster over
// rounds, which one pair alone would lend to whichever client it made
// second. Each burst starts from a collected heap (runtime.GC, untimed):
// in one process the collections that both clients' garbage starts fall
// mostly on the one that allocates more, which cost retryfuse about 3
// points of the ratio that were not its own.
func BenchmarkGETParallel256(b *testing.B) {
	const goroutines, burstCalls = 256, 1000
	srv := newServer(b)
	cs := []client{bareClient(), retryfuseClient(), retryfuseClient(), bareClient()}
	kind := []int{0, 1, 1, 0} // cs[i] is bare (0) or retryfuse (1)
	defer closeAll(cs)
	for _, c := range cs {
		c.base.MaxIdleConns, c.base.MaxIdleConnsPerHost = goroutines, goroutines
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err := do(srv, c, req, http.StatusOK); err != nil {
			b.Fatal(err)
		}
	}
	var (
		took  [2]time.Duration // by kind
		calls [2]int64
		conns [2]int64
	)
	b.ReportAllocs()
	b.ResetTimer()
	for left, k := int64(b.N), 0; left > 0; k++ {
		n := min(left, burstCalls)
		left -= n
		for j := range cs {
			i := (j + k) % len(cs)
			// Each burst starts from a collected heap, so that it pays for
			// its own garbage: a collection that the previous burst's
			// garbage started would land on the client that allocates more.
			runtime.GC()
			reqs0, conns0 := srv.requests.Load(), srv.conns.Load()
			d, err := burst(cs[i], srv.URL, goroutines, n)
			if err != nil {
				b.Fatal(err)
			}
			if got := srv.requests.Load() - reqs0; got != n {
				b.Fatalf("%s: %d requests reached the server for %d calls", cs[i].name, got, n)
			}
			took[kind[i]] += d
			calls[kind[i]] += n
			conns[kind[i]] += srv.conns.Load() - conns0
		}
	}
	b.StopTimer()
	for i, c := range cs[:2] {
		b.ReportMetric(float64(calls[i])/took[i].Seconds(), c.name+"-calls/s")
		b.ReportMetric(float64(conns[i])/float64(calls[i]), c.name+"-new-conns/call")
	}
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "retryfuse-x")
	b.ReportMetric(goroutines, "goroutines")
}

// burst sends n GETs to url through c from g goroutines taking turns, and
// returns how long they took.
func burst(c client, url string, g int, n int64) (time.Duration, error) {
	var (
		tickets atomic.Int64
		failed  atomic.Value
		wg      sync.WaitGroup
	)
	tickets.Store(n)
	start := time.Now()
	for range g {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			for tickets.Add(-1) >= 0 {
				resp, err := c.Do(req)
				if err != nil {
					failed.Store(fmt.Errorf("%s: %v", c.name, err))
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Store(fmt.Errorf("%s: status %d, want 200", c.name, resp.StatusCode))
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		return d, err
	}
	return d, nil
}
