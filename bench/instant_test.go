package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fsbudget "github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
)

// instantBase answers every request at once with 200 and no body: no
// network, no connection, so that what a client adds over it is the
// library's own work alone. Like a real base, it allocates the response.
type instantBase struct{}

func (instantBase) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Body: http.NoBody, Request: req}, nil
}

// traceOnly is the least a RoundTripper does to see an attempt on the
// wire, as retryfuse must to know how far it got: a ClientTrace with a
// GotConn hook in the request's context, which takes a context to carry it
// and a copy of the request to carry that (http.Request.WithContext). It
// repeats nothing. It is the floor under any client that traces its
// attempts, as otelhttp's client trace does.
type traceOnly struct{ base http.RoundTripper }

func (t traceOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	conns := new(atomic.Int32)
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conns.Add(1) }}
	return t.base.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
}

// instantClient is one configuration over instantBase: a RoundTripper
// called directly, without http.Client, whose work is the library's only.
type instantClient struct {
	name string
	rt   http.RoundTripper
}

// instantClients are the configurations of the own-cost table, bare
// first. The retrying ones make at most 3 attempts.
func instantClients(tb testing.TB) []instantClient {
	budget := &budget.Ratio{}
	br, err := breaker.New(breaker.Settings{})
	if err != nil {
		tb.Fatal(err)
	}
	gated := &retryfuse.Transport{
		Base: instantBase{},
		Retry: retryfuse.RetryPolicy{
			Budget: budget,
		},
		Brake: retryfuse.BrakePolicy{
			Breaker: br,
		},
		Hooks: retryfuse.Hooks{
			AttemptStart: func(retryfuse.AttemptStartInfo) {},
			AttemptDone:  func(retryfuse.AttemptDoneInfo) {},
		},
	}
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{Transport: instantBase{}}
	rc.RetryMax = 2
	rc.Logger = nil
	// go-retryablehttp's peers of the gated configurations: its per-attempt
	// timeout is its http.Client's Timeout (each attempt is one Do), and
	// its hooks are the request and response log hooks.
	rcTimeout := retryablehttp.NewClient()
	rcTimeout.HTTPClient = &http.Client{Transport: instantBase{}, Timeout: 300 * time.Millisecond}
	rcTimeout.RetryMax = 2
	rcTimeout.Logger = nil
	rcHooks := retryablehttp.NewClient()
	rcHooks.HTTPClient = &http.Client{Transport: instantBase{}}
	rcHooks.RetryMax = 2
	rcHooks.Logger = nil
	rcHooks.RequestLogHook = func(retryablehttp.Logger, *http.Request, int) {}
	rcHooks.ResponseLogHook = func(retryablehttp.Logger, *http.Response) {}
	return []instantClient{
		{"bare", instantBase{}},
		{"trace-only", traceOnly{instantBase{}}},
		{"retryfuse", &retryfuse.Transport{Base: instantBase{}}},
		{"retryfuse-timeout", &retryfuse.Transport{Base: instantBase{}, Retry: retryfuse.RetryPolicy{AttemptTimeout: 300 * time.Millisecond}}},
		{"retryfuse-gated", gated},
		{"retryablehttp", &retryablehttp.RoundTripper{Client: rc}},
		{"retryablehttp-timeout", &retryablehttp.RoundTripper{Client: rcTimeout}},
		{"retryablehttp-hooks", &retryablehttp.RoundTripper{Client: rcHooks}},
		{"failsafe", failsafehttp.NewRoundTripper(instantBase{}, failsafehttp.NewRetryPolicyBuilder().WithMaxAttempts(3).Build())},
		// failsafe-go's peers of the gated configurations: a timeout policy
		// inside the retry policy (per attempt); a retry budget, a circuit
		// breaker and two no-op listeners.
		{"failsafe-timeout", failsafehttp.NewRoundTripper(instantBase{}, failsafehttp.NewRetryPolicyBuilder().WithMaxAttempts(3).Build(),
			timeout.New[*http.Response](300*time.Millisecond))},
		{"failsafe-gated", failsafehttp.NewRoundTripperWithExecutor(instantBase{}, failsafe.With[*http.Response](
			failsafehttp.NewRetryPolicyBuilder().WithMaxAttempts(3).WithBudget(fsbudget.New()).Build(),
			circuitbreaker.NewWithDefaults[*http.Response]()).
			OnDone(func(failsafe.ExecutionDoneEvent[*http.Response]) {}).
			OnSuccess(func(failsafe.ExecutionDoneEvent[*http.Response]) {}))},
	}
}

// instantCall makes one GET through rt and closes the response's body.
func instantCall(tb testing.TB, rt http.RoundTripper, req *http.Request) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("status %d, want 200", resp.StatusCode)
	}
	_ = resp.Body.Close()
}

// instantCallErr is instantCall for a goroutine other than the
// benchmark's: it returns what went wrong instead of stopping the test.
func instantCallErr(rt http.RoundTripper, req *http.Request) error {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d, want 200", resp.StatusCode)
	}
	return nil
}

// instantBlock is how many calls of one client are timed together, so
// that reading the clock costs a call nothing measurable.
const instantBlock = 200

// BenchmarkInstantGET gives each client's own cost per successful GET over
// instantBase: blocks of instantBlock calls of each client, in an order
// shuffled each iteration (orders), so that the machine's drift meets
// every client alike and no client always follows the same one. It reports each client's time per call (name-ns/call) and
// its cost over the bare base (name-own-ns), which is the library's.
func BenchmarkInstantGET(b *testing.B) {
	cs := instantClients(b)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://dependency.test/items", nil)
	for _, c := range cs {
		instantCall(b, c.rt, req) // first use: settings resolved, scopes made
	}
	total := make([]time.Duration, len(cs))
	next := orders(len(cs))
	iter := 0
	for b.Loop() {
		for _, i := range next() {
			t0 := time.Now()
			for range instantBlock {
				instantCall(b, cs[i].rt, req)
			}
			total[i] += time.Since(t0)
		}
		iter++
	}
	reportInstant(b, cs, total, iter*instantBlock)
}

// reportInstant reports each client's time per call, total being the time
// of its n calls, and its time over the bare base's (cs[0]).
func reportInstant(b *testing.B, cs []instantClient, total []time.Duration, n int) {
	bare := float64(total[0].Nanoseconds()) / float64(n)
	for i, c := range cs {
		per := float64(total[i].Nanoseconds()) / float64(n)
		b.ReportMetric(per, c.name+"-ns/call")
		if i > 0 {
			b.ReportMetric(per-bare, c.name+"-own-ns")
		}
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkInstantGETParallel is BenchmarkInstantGET with callers on every
// core: each block is instantBlock calls on each of 2·GOMAXPROCS
// goroutines, all through the one client, which shares its state between
// them (a scope's budget and throttle, a breaker) as it does in service.
// What contention on that state costs shows here, and not in
// BenchmarkInstantGET. It reports each client's time per call of the
// block's wall time (name-ns/call) and its excess over the bare base's
// (name-own-ns).
func BenchmarkInstantGETParallel(b *testing.B) {
	cs := instantClients(b)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://dependency.test/items", nil)
	for _, c := range cs {
		instantCall(b, c.rt, req)
	}
	callers := 2 * runtime.GOMAXPROCS(0)
	total := make([]time.Duration, len(cs))
	var failed atomic.Pointer[error]
	next := orders(len(cs))
	iter := 0
	for b.Loop() {
		for _, i := range next() {
			var wg sync.WaitGroup
			t0 := time.Now()
			for range callers {
				wg.Go(func() {
					for range instantBlock {
						if err := instantCallErr(cs[i].rt, req); err != nil {
							failed.CompareAndSwap(nil, &err)
							return
						}
					}
				})
			}
			wg.Wait()
			total[i] += time.Since(t0)
		}
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
		iter++
	}
	reportInstant(b, cs, total, iter*instantBlock*callers)
	b.ReportMetric(float64(callers), "goroutines")
}

// BenchmarkInstantGETAllocs gives each client's bytes and allocations per
// GET over instantBase, the base's own response included (one
// allocation, alike for every client).
func BenchmarkInstantGETAllocs(b *testing.B) {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://dependency.test/items", nil)
	for _, c := range instantClients(b) {
		b.Run(c.name, func(b *testing.B) {
			instantCall(b, c.rt, req)
			b.ReportAllocs()
			for b.Loop() {
				instantCall(b, c.rt, req)
			}
		})
	}
}

// evictBuf is written through between calls by BenchmarkColdGET: 2 MiB,
// more than a core's own caches hold here, so that what a call touches
// comes from the shared cache or memory, as it does after a network round
// trip and the server's work in between.
var evictBuf = make([]byte, 2<<20)

// evict writes one byte of every cache line of evictBuf.
func evict() {
	for i := 0; i < len(evictBuf); i += 64 {
		evictBuf[i]++
	}
}

// BenchmarkColdGET gives each client's own cost per GET over instantBase
// with the caches gone cold between calls: before each call, evictBuf is
// written through; each call is timed alone, and a client's own cost
// (name-own-ns) is the median of its calls less the median of the bare
// base's. Over loopback the library's code and data go cold between calls
// in the same way, and what a call touches (its cache lines of code and
// data) then costs more than what it computes; BenchmarkInstantGET, with
// everything in the core's caches, shows the latter.
func BenchmarkColdGET(b *testing.B) {
	cs := instantClients(b)
	for _, c := range cs {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://dependency.test/items", nil)
		instantCall(b, c.rt, req) // first use: settings resolved, scopes made
	}
	took := make([][]time.Duration, len(cs))
	next := orders(len(cs))
	for b.Loop() {
		for _, i := range next() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://dependency.test/items", nil)
			evict()
			t0 := time.Now()
			instantCall(b, cs[i].rt, req)
			took[i] = append(took[i], time.Since(t0))
		}
	}
	median := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2])
	}
	bare := median(took[0])
	for i, c := range cs[1:] {
		b.ReportMetric(median(took[i+1])-bare, c.name+"-own-ns")
	}
	b.ReportMetric(0, "ns/op")
}
