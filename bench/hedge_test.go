package bench

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse"
)

// The tail-latency comparison: sequential GETs to a dependency that
// answers at once but for one request in every tailSlowEvery it receives
// (at a seeded random place in each run of tailSlowEvery: exactly 5%),
// which it holds for tailSlowFor (or until the client cancels it).
const (
	tailCalls      = 400
	tailSlowEvery  = 20
	tailSlowFor    = 200 * time.Millisecond
	tailHedgeDelay = 20 * time.Millisecond
	tailSeed       = 7
)

// slowTail is a dependency with a slow tail. Each client gets its own,
// with the same seed.
type slowTail struct {
	*httptest.Server
	mu   sync.Mutex
	rnd  *rand.Rand
	n    int // requests received
	slow int // the place of the slow one in the current run of tailSlowEvery
	sent atomic.Int64
}

func newSlowTail(tb testing.TB) *slowTail {
	s := &slowTail{rnd: rand.New(rand.NewPCG(tailSeed, tailSeed))}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s.Listener = ln
	s.Start()
	tb.Cleanup(s.Close)
	return s
}

func (s *slowTail) serve(w http.ResponseWriter, r *http.Request) {
	s.sent.Add(1)
	s.mu.Lock()
	if s.n%tailSlowEvery == 0 {
		s.slow = s.rnd.IntN(tailSlowEvery)
	}
	slow := s.n%tailSlowEvery == s.slow
	s.n++
	s.mu.Unlock()
	if slow {
		t := time.NewTimer(tailSlowFor)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	_, _ = io.WriteString(w, responseBody)
}

// hedgeClients are the clients compared: unhedged, retryfuse with a fixed
// delay and with delays derived from the observed p95 and p99,
// failsafe-go's hedge policy with a fixed delay and the p95.
func hedgeClients() []client {
	mk := func(name string, rt func(base *http.Transport) http.RoundTripper) client {
		base := cleanhttp.DefaultPooledTransport()
		return client{name, &http.Client{Transport: rt(base)}, base}
	}
	return []client{
		mk("bare", func(base *http.Transport) http.RoundTripper { return base }),
		mk("retryfuse-20ms", func(base *http.Transport) http.RoundTripper {
			return &retryfuse.Transport{Base: base, Hedge: retryfuse.HedgePolicy{Max: 1, Delay: tailHedgeDelay}}
		}),
		mk("retryfuse-p95", func(base *http.Transport) http.RoundTripper {
			return &retryfuse.Transport{Base: base, Hedge: retryfuse.HedgePolicy{Max: 1, Delay: tailHedgeDelay, Quantile: 0.95}}
		}),
		mk("retryfuse-p99", func(base *http.Transport) http.RoundTripper {
			return &retryfuse.Transport{Base: base, Hedge: retryfuse.HedgePolicy{Max: 1, Delay: tailHedgeDelay, Quantile: 0.99}}
		}),
		mk("failsafe-20ms", func(base *http.Transport) http.RoundTripper {
			return failsafehttp.NewRoundTripper(base, hedgepolicy.NewWithDelay[*http.Response](tailHedgeDelay))
		}),
		mk("failsafe-p95", func(base *http.Transport) http.RoundTripper {
			// The p95 of the last 400 executions, once 20 have been seen.
			return failsafehttp.NewRoundTripper(base, hedgepolicy.NewWithDelayQuantile[*http.Response](0.95, tailCalls, 20))
		}),
	}
}

// BenchmarkHedgeTail makes tailCalls sequential GETs through each client,
// interleaved call by call, each client against a slowTail of its own,
// and reports per client the p50 and p99 latency (ms) and the requests
// sent beyond one per call (extra-%). One iteration is one whole run: use
// -benchtime 1x (bench/hedge does).
func BenchmarkHedgeTail(b *testing.B) {
	for range b.N {
		cs := hedgeClients()
		srvs := make([]*slowTail, len(cs))
		for i := range cs {
			srvs[i] = newSlowTail(b)
		}
		took := make([][]time.Duration, len(cs))
		for range tailCalls {
			for i, c := range cs {
				d, err := timedGET(c, srvs[i].URL)
				if err != nil {
					b.Fatalf("%s: %v", c.name, err)
				}
				took[i] = append(took[i], d)
			}
		}
		closeAll(cs)
		for i, c := range cs {
			slices.Sort(took[i])
			b.Run(c.name, func(b *testing.B) {
				b.ReportMetric(ms(took[i][len(took[i])*50/100]), "p50-ms")
				b.ReportMetric(ms(took[i][len(took[i])*99/100]), "p99-ms")
				b.ReportMetric(100*float64(srvs[i].sent.Load()-tailCalls)/tailCalls, "extra-%")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func timedGET(c client, url string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return time.Since(began), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// slowAll holds every request for tailSlowFor.
type slowAll struct {
	*httptest.Server
	sent atomic.Int64
}

func newSlowAll(tb testing.TB) *slowAll {
	s := &slowAll{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.sent.Add(1)
		t := time.NewTimer(tailSlowFor)
		defer t.Stop()
		select {
		case <-t.C:
			_, _ = io.WriteString(w, responseBody)
		case <-r.Context().Done():
		}
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s.Listener = ln
	s.Start()
	tb.Cleanup(s.Close)
	return s
}

// BenchmarkHedgeUniformlySlow makes slowCalls sequential GETs to a
// dependency that holds every request for 200ms, through the hedging
// clients with a fixed 20ms delay, and reports the requests sent beyond
// one per call: every call is late, so every call would hedge, but
// retryfuse charges each hedge to the scope's retry budget (a RatioBudget:
// 10% of requests plus 1 per second) and sends no hedge it refuses.
func BenchmarkHedgeUniformlySlow(b *testing.B) {
	const slowCalls = 50
	for range b.N {
		all := hedgeClients()
		cs := []client{all[1], all[4]} // retryfuse-20ms, failsafe-20ms
		closeAll(all)
		srvs := []*slowAll{newSlowAll(b), newSlowAll(b)}
		for range slowCalls {
			for i, c := range cs {
				if _, err := timedGET(c, srvs[i].URL); err != nil {
					b.Fatalf("%s: %v", c.name, err)
				}
			}
		}
		closeAll(cs)
		for i, c := range cs {
			b.Run(c.name, func(b *testing.B) {
				b.ReportMetric(100*float64(srvs[i].sent.Load()-slowCalls)/slowCalls, "extra-%")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
