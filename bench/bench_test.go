package bench

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/retryfuse/retryfuse"
)

// responseBody is what the server answers: a small body.
const responseBody = "ok, a small body"

// postBody is the body of every keyed POST: 16 KiB.
var postBody = bytes.Repeat([]byte("x"), 16<<10)

// server is a loopback server that counts the requests and the connections
// it receives. It reads every request's body in full, answers a GET with
// 200 and a POST with 201, and answers 503 with Retry-After: 0 on the path
// /unavailable (which only the test uses).
type server struct {
	*httptest.Server
	requests atomic.Int64
	conns    atomic.Int64
}

func newServer(tb testing.TB) *server {
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s.Listener = ln
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	tb.Cleanup(s.Close)
	return s
}

func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	_, _ = io.Copy(io.Discard, r.Body)
	switch {
	case r.URL.Path == "/unavailable":
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	case r.Method == http.MethodPost:
		if r.Header.Get("Idempotency-Key") == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
	_, _ = io.WriteString(w, responseBody)
}

// client is one configuration under comparison: an http.Client and the
// pooled base transport under it, whose idle connections are closed at
// the end.
type client struct {
	name string
	*http.Client
	base *http.Transport
}

func (c client) close() { c.base.CloseIdleConnections() }

// The clients. Each has a fresh base of identical settings,
// cleanhttp.DefaultPooledTransport, and keeps its library's defaults
// otherwise; the retrying ones make at most 3 attempts.

func bareClient() client {
	base := cleanhttp.DefaultPooledTransport()
	return client{"bare", &http.Client{Transport: base}, base}
}

// traceOnlyClient only traces each request (traceOnly): the floor under
// any client that knows how far its attempts got.
func traceOnlyClient() client {
	base := cleanhttp.DefaultPooledTransport()
	return client{"trace-only", &http.Client{Transport: traceOnly{base}}, base}
}

func retryfuseClient() client {
	base := cleanhttp.DefaultPooledTransport()
	return client{"retryfuse", &http.Client{Transport: &retryfuse.Transport{Base: base}}, base}
}

func retryfuseTimeoutClient() client {
	base := cleanhttp.DefaultPooledTransport()
	rt := &retryfuse.Transport{Base: base, AttemptTimeout: 300 * time.Millisecond}
	return client{"retryfuse-timeout", &http.Client{Transport: rt}, base}
}

// retryfuseGatedClient has the gates a real deployment turns on: a
// RatioBudget shared by every scope, a Breaker and two no-op hooks.
func retryfuseGatedClient() client {
	base := cleanhttp.DefaultPooledTransport()
	br, _ := retryfuse.NewBreaker(retryfuse.BreakerSettings{})
	rt := &retryfuse.Transport{Base: base, Budget: &retryfuse.RatioBudget{}, Breaker: br, Hooks: retryfuse.Hooks{
		AttemptStart: func(retryfuse.AttemptStartInfo) {},
		AttemptDone:  func(retryfuse.AttemptDoneInfo) {},
	}}
	return client{"retryfuse-gated", &http.Client{Transport: rt}, base}
}

func retryfuseLedgerClient() client {
	base := cleanhttp.DefaultPooledTransport()
	rt := &retryfuse.Transport{Base: base, Ledger: &retryfuse.MemoryLedger{}}
	return client{"retryfuse-ledger", &http.Client{Transport: rt}, base}
}

// retryfuseHedgeClient hedges each GET after 20 ms; on this success path
// no hedge is sent, so it measures what hedging costs a call that
// answers at once (its first branch runs on a goroutine of its own).
func retryfuseHedgeClient() client {
	base := cleanhttp.DefaultPooledTransport()
	rt := &retryfuse.Transport{Base: base, MaxHedges: 1, HedgeDelay: 20 * time.Millisecond}
	return client{"retryfuse-hedge", &http.Client{Transport: rt}, base}
}

func retryablehttpClient() client {
	base := cleanhttp.DefaultPooledTransport()
	rc := retryablehttp.NewClient() // DefaultRetryPolicy, DefaultBackoff
	rc.HTTPClient = &http.Client{Transport: base}
	rc.RetryMax = 2 // 3 attempts
	rc.Logger = nil
	return client{"retryablehttp", rc.StandardClient(), base}
}

func failsafeClient() client {
	base := cleanhttp.DefaultPooledTransport()
	rp := failsafehttp.NewRetryPolicyBuilder().WithMaxAttempts(3).Build()
	return client{"failsafe", &http.Client{Transport: failsafehttp.NewRoundTripper(base, rp)}, base}
}

// failsafeHedgeClient is failsafeClient with a hedge policy of 20 ms
// inside its retry policy.
func failsafeHedgeClient() client {
	base := cleanhttp.DefaultPooledTransport()
	rp := failsafehttp.NewRetryPolicyBuilder().WithMaxAttempts(3).Build()
	hp := hedgepolicy.NewWithDelay[*http.Response](20 * time.Millisecond)
	return client{"failsafe-hedge", &http.Client{Transport: failsafehttp.NewRoundTripper(base, rp, hp)}, base}
}

// getClients are the clients of the GET family, bare first.
func getClients() []client {
	return []client{bareClient(), traceOnlyClient(), retryfuseClient(), retryfuseTimeoutClient(), retryfuseGatedClient(), retryfuseHedgeClient(),
		retryablehttpClient(), failsafeClient(), failsafeHedgeClient()}
}

// postClients are the clients of the keyed POST family, bare first.
func postClients() []client {
	return []client{bareClient(), retryfuseClient(), retryfuseLedgerClient()}
}

func closeAll(cs []client) {
	for _, c := range cs {
		c.close()
	}
}

// do sends req through c, reads and closes the body, and checks the
// status and that exactly one request reached srv. It may run on any
// goroutine: it returns what went wrong.
func do(srv *server, c client, req *http.Request, want int) error {
	before := srv.requests.Load()
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %v", c.name, err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("%s: reading the body: %v", c.name, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, want)
	}
	if n := srv.requests.Load() - before; n != 1 {
		return fmt.Errorf("%s: %d requests reached the server for one call, want 1", c.name, n)
	}
	return nil
}

// keys numbers the idempotency keys of the keyed POSTs, so that the
// ledger never replays one.
var keys atomic.Uint64

// newPOST is a keyed POST of postBody under a key of its own.
func newPOST(url string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(postBody))
	req.Header.Set("Idempotency-Key", "order-"+strconv.FormatUint(keys.Add(1), 10))
	return req
}

// interleaved runs one call through every client per iteration, in an
// order that rotates each iteration, times each call, and reports each
// client's mean (name-ns/call) and its ratio to the first client, bare
// (name-x). Interleaving spreads the drift of a shared machine over every
// client alike, where sub-benchmarks run one after the other do not.
// newReq gives the request of a client's call; it is built outside the
// timed span.
func interleaved(b *testing.B, srv *server, cs []client, newReq func(i int) *http.Request, want int) {
	defer closeAll(cs)
	for i, c := range cs { // warm each client's connection
		if err := do(srv, c, newReq(i), want); err != nil {
			b.Fatal(err)
		}
	}
	total := make([]time.Duration, len(cs))
	iter := 0
	for b.Loop() {
		for k := range cs {
			i := (iter + k) % len(cs)
			req := newReq(i)
			t0 := time.Now()
			err := do(srv, cs[i], req, want)
			total[i] += time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
		}
		iter++
	}
	n := float64(iter)
	for i, c := range cs {
		b.ReportMetric(float64(total[i].Nanoseconds())/n, c.name+"-ns/call")
		if i > 0 {
			b.ReportMetric(float64(total[i])/float64(total[0]), c.name+"-x")
		}
	}
	// An iteration's time, bytes and allocations are those of every
	// client and of the server together: ns/op is left out, and
	// BenchmarkGETAllocs and BenchmarkKeyedPOSTAllocs give the bytes and
	// allocations of each client.
	b.ReportMetric(0, "ns/op")
}

// BenchmarkGET compares a loopback GET answered 200 through bare
// net/http, retryfuse (with and without AttemptTimeout), go-retryablehttp
// and failsafe-go, interleaved.
func BenchmarkGET(b *testing.B) {
	srv := newServer(b)
	cs := getClients()
	reqs := make([]*http.Request, len(cs))
	for i := range reqs {
		reqs[i], _ = http.NewRequest(http.MethodGet, srv.URL, nil)
	}
	interleaved(b, srv, cs, func(i int) *http.Request { return reqs[i] }, http.StatusOK)
}

// BenchmarkGETLoadControls compares what the controls of load cost a GET
// that succeeds: retryfuse without them (DisableThrottle), with its
// defaults (the throttle) and with AdaptiveInFlight, interleaved, beside
// bare net/http.
func BenchmarkGETLoadControls(b *testing.B) {
	srv := newServer(b)
	mk := func(name string, tr *retryfuse.Transport) client {
		base := cleanhttp.DefaultPooledTransport()
		tr.Base = base
		return client{name, &http.Client{Transport: tr}, base}
	}
	cs := []client{bareClient(),
		mk("retryfuse-nothrottle", &retryfuse.Transport{DisableThrottle: true}),
		mk("retryfuse", &retryfuse.Transport{}),
		mk("retryfuse-adaptive", &retryfuse.Transport{AdaptiveInFlight: true})}
	reqs := make([]*http.Request, len(cs))
	for i := range reqs {
		reqs[i], _ = http.NewRequest(http.MethodGet, srv.URL, nil)
	}
	interleaved(b, srv, cs, func(i int) *http.Request { return reqs[i] }, http.StatusOK)
}

// BenchmarkKeyedPOST compares a keyed POST of 16 KiB answered 201 through
// bare net/http and retryfuse, without and with a MemoryLedger,
// interleaved. Every call has a key of its own.
func BenchmarkKeyedPOST(b *testing.B) {
	srv := newServer(b)
	interleaved(b, srv, postClients(), func(int) *http.Request { return newPOST(srv.URL) }, http.StatusCreated)
}

// separate runs each client in a sub-benchmark of its own, for the
// allocation counts, which drift does not touch. The server's allocations
// are counted too, alike for every client.
func separate(b *testing.B, cs []client, srv *server, newReq func() *http.Request, want int) {
	defer closeAll(cs)
	for _, c := range cs {
		b.Run(c.name, func(b *testing.B) {
			if err := do(srv, c, newReq(), want); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := do(srv, c, newReq(), want); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGETAllocs gives the bytes and allocations per GET of each
// client of BenchmarkGET.
func BenchmarkGETAllocs(b *testing.B) {
	srv := newServer(b)
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	separate(b, getClients(), srv, func() *http.Request { return req }, http.StatusOK)
}

// BenchmarkKeyedPOSTAllocs gives the bytes and allocations per keyed POST
// of each client of BenchmarkKeyedPOST (building the request included,
// alike for each).
func BenchmarkKeyedPOSTAllocs(b *testing.B) {
	srv := newServer(b)
	separate(b, postClients(), srv, func() *http.Request { return newPOST(srv.URL) }, http.StatusCreated)
}

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

// TestClients runs each client once against the server and checks the
// status and that exactly one request arrived; then, against a server
// that answers 503 with Retry-After: 0, that bare net/http sends one
// request and each retrying client three, which pins the configurations
// the benchmarks compare.
func TestClients(t *testing.T) {
	srv := newServer(t)
	check := func(cs []client, newReq func() *http.Request, want int) {
		defer closeAll(cs)
		for _, c := range cs {
			if err := do(srv, c, newReq(), want); err != nil {
				t.Error(err)
			}
		}
	}
	check(getClients(), func() *http.Request {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		return req
	}, http.StatusOK)
	check(postClients(), func() *http.Request { return newPOST(srv.URL) }, http.StatusCreated)

	attempts := func(cs []client, newReq func() *http.Request) {
		defer closeAll(cs)
		for _, c := range cs {
			want := int64(3)
			if c.name == "bare" || c.name == "trace-only" { // they repeat nothing
				want = 1
			}
			before := srv.requests.Load()
			resp, err := c.Do(newReq())
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			if got := srv.requests.Load() - before; got != want {
				t.Errorf("%s: %d requests for a call answered 503, want %d", c.name, got, want)
			}
		}
	}
	attempts(getClients(), func() *http.Request {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/unavailable", nil)
		return req
	})
	attempts(postClients(), func() *http.Request { return newPOST(srv.URL + "/unavailable") })
}
