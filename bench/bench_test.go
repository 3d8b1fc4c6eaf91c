package bench

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
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
	rt := &retryfuse.Transport{Base: base, Retry: retryfuse.RetryPolicy{AttemptTimeout: 300 * time.Millisecond}}
	return client{"retryfuse-timeout", &http.Client{Transport: rt}, base}
}

// retryfuseGatedClient has the gates a real deployment turns on: a
// RatioBudget shared by every scope, a Breaker and two no-op hooks.
func retryfuseGatedClient() client {
	base := cleanhttp.DefaultPooledTransport()
	br, _ := breaker.New(breaker.Settings{})
	rt := &retryfuse.Transport{
		Base: base,
		Retry: retryfuse.RetryPolicy{
			Budget: &budget.Ratio{},
		},
		Brake: retryfuse.BrakePolicy{
			Breaker: br,
		},
		Hooks: retryfuse.Hooks{
			AttemptStart: func(retryfuse.AttemptStartInfo) {},
			AttemptDone:  func(retryfuse.AttemptDoneInfo) {},
		},
	}
	return client{"retryfuse-gated", &http.Client{Transport: rt}, base}
}

func retryfuseLedgerClient() client {
	base := cleanhttp.DefaultPooledTransport()
	rt := &retryfuse.Transport{Base: base, Keys: retryfuse.KeyPolicy{Ledger: &ledger.Memory{}}}
	return client{"retryfuse-ledger", &http.Client{Transport: rt}, base}
}

// retryfuseHedgeClient hedges each GET after 20 ms; on this success path
// no hedge is sent, so it measures what hedging costs a call that
// answers at once (its first branch runs on a goroutine of its own).
func retryfuseHedgeClient() client {
	base := cleanhttp.DefaultPooledTransport()
	rt := &retryfuse.Transport{Base: base, Hedge: retryfuse.HedgePolicy{Max: 1, Delay: 20 * time.Millisecond}}
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

// orders returns a function that gives an order of n clients each time it
// is called: the numbers 0 to n-1 shuffled, from a fixed seed, so that
// runs repeat and no client always follows the same one (see
// interleaved). The slice it returns is reused by the next call.
func orders(n int) func() []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	return func() []int {
		rnd.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
		return order
	}
}

// interleaved runs one call through every client per iteration, in an
// order shuffled each iteration (from a fixed seed), times each call, and
// reports each client's mean (name-ns/call) and its ratio to the first
// client, bare (name-x). Interleaving spreads the drift of a shared
// machine over every client alike, where sub-benchmarks run one after the
// other do not; the shuffle gives each client every other as the one
// before it, as a rotation of one order does not (each client would
// always follow the same one, and find the caches as that one leaves
// them). newReq gives the request of a client's call; it is built outside
// the timed span.
func interleaved(b *testing.B, srv *server, cs []client, newReq func(i int) *http.Request, want int) {
	defer closeAll(cs)
	for i, c := range cs { // warm each client's connection
		if err := do(srv, c, newReq(i), want); err != nil {
			b.Fatal(err)
		}
	}
	total := make([]time.Duration, len(cs))
	next := orders(len(cs))
	iter := 0
	for b.Loop() {
		for _, i := range next() {
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
// that succeeds: retryfuse with its defaults (none of them), with the
// throttle and the pace, and with every adaptive control (the learnt
// limit too), interleaved, beside bare net/http.
func BenchmarkGETLoadControls(b *testing.B) {
	srv := newServer(b)
	mk := func(name string, tr *retryfuse.Transport) client {
		base := cleanhttp.DefaultPooledTransport()
		tr.Base = base
		return client{name, &http.Client{Transport: tr}, base}
	}
	cs := []client{bareClient(),
		mk("retryfuse", &retryfuse.Transport{}),
		mk("retryfuse-throttle", &retryfuse.Transport{Load: retryfuse.LoadPolicy{Throttle: retryfuse.ThrottlePolicy{On: true}, Pace: true}}),
		mk("retryfuse-adaptive", &retryfuse.Transport{Load: retryfuse.LoadPolicy{Adaptive: true, Throttle: retryfuse.ThrottlePolicy{On: true}, Pace: true}})}
	reqs := make([]*http.Request, len(cs))
	for i := range reqs {
		reqs[i], _ = http.NewRequest(http.MethodGet, srv.URL, nil)
	}
	interleaved(b, srv, cs, func(i int) *http.Request { return reqs[i] }, http.StatusOK)
}

// BenchmarkKeyedPOST compares a keyed POST of 16 KiB answered 201 through
// bare net/http and retryfuse, without and with a ledger.Memory,
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
