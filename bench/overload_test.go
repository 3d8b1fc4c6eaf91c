package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/adaptivethrottler"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
)

// The overload comparison: what reaches a dependency, and what its
// callers get, when it is offered more than it can take, through
// retryfuse's controls of load beside failsafe-go's adaptive limiter and
// adaptive throttler. The script ./overload runs it.
//
// Every client makes at most 3 attempts of at most 200 ms each, within the
// caller's deadline of 500 ms, with a backoff from 100 ms (full jitter;
// failsafe-go: 100 ms doubling, jittered by half), over a base that keeps
// 256 idle connections per host (with the pooled default of 3, the
// dialling would set the figures).

const (
	attempts       = 3
	attemptTimeout = 200 * time.Millisecond
	deadline       = 500 * time.Millisecond
	backoff        = 100 * time.Millisecond
)

// loadClient is a client of the comparison: a RoundTripper over its own
// base, and how it tells a local refusal by its error.
type loadClient struct {
	name    string
	rt      http.RoundTripper
	base    *http.Transport
	refused func(error) bool
}

func newBase() *http.Transport {
	base := cleanhttp.DefaultPooledTransport()
	base.MaxIdleConnsPerHost = 256
	return base
}

func (c loadClient) doer() doer {
	return doer{client: &http.Client{Transport: c.rt}, refused: c.refused}
}

// retryfuseRefused: refused before anything was sent (a refusal after
// attempts comes back as their last result, or as a *RetryError).
func retryfuseRefused(err error) bool {
	var re *retryfuse.RetryError
	return errors.Is(err, retryfuse.ErrDeclined) && !errors.As(err, &re)
}

func failsafeRefused(err error) bool {
	return errors.Is(err, adaptivelimiter.ErrExceeded) || errors.Is(err, adaptivethrottler.ErrExceeded)
}

// retryfuseLoad is a retryfuse client named name, configured by set.
func retryfuseLoad(name string, set func(*retryfuse.Transport)) loadClient {
	base := newBase()
	tr := &retryfuse.Transport{Base: base, Retry: retryfuse.RetryPolicy{MaxAttempts: attempts, InitialBackoff: backoff, AttemptTimeout: attemptTimeout}}
	if set != nil {
		set(tr)
	}
	return loadClient{name, tr, base, retryfuseRefused}
}

// failsafeLoad is a failsafe-go client: its HTTP retry policy (3 attempts,
// never retrying a refusal of the limiter or throttler), then p, then a
// timeout per attempt.
func failsafeLoad(name string, p failsafe.Policy[*http.Response]) loadClient {
	base := newBase()
	rp := failsafehttp.NewRetryPolicyBuilder().
		WithMaxAttempts(attempts).
		WithBackoff(backoff, 10*time.Second).
		WithJitterFactor(0.5).
		AbortOnErrors(adaptivelimiter.ErrExceeded, adaptivethrottler.ErrExceeded).
		Build()
	to := timeout.New[*http.Response](attemptTimeout)
	return loadClient{name, failsafehttp.NewRoundTripper(base, rp, p, to), base, failsafeRefused}
}

// rejected is what failsafe-go's throttler counts as a rejection: what
// retryfuse's throttle counts (a 429, a 503, or no answer).
func rejected(resp *http.Response, err error) bool {
	return err != nil || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
}

// The clients.
var (
	// plainLoop retries any error and any 5xx or 429, after the backoff.
	plainLoop = func() loadClient {
		base := newBase()
		return loadClient{"plain", &plainRT{base: base}, base, func(error) bool { return false }}
	}
	// retryfuseBudgets is retryfuse with the throttle of new calls and
	// the pace learnt from 429s switched on (what its defaults were before
	// the controls of load became opt-in); retryfuseDefault is its
	// defaults: the retry budget alone.
	retryfuseBudgets = func() loadClient {
		return retryfuseLoad("retryfuse-throttle", func(t *retryfuse.Transport) {
			t.Load.Throttle.On, t.Load.Pace = true, true
		})
	}
	retryfuseDefault = func() loadClient { return retryfuseLoad("retryfuse", nil) }
	// retryfuseStatic is a bulkhead set to the right guess: the
	// dependency's 8 workers, twice.
	retryfuseStatic = func() loadClient {
		return retryfuseLoad("retryfuse-static", func(t *retryfuse.Transport) { t.Load.MaxInFlight = 16 })
	}
	// retryfuseAdaptive switches every adaptive control on: the learnt
	// limit with its slow start, the throttle and the pace.
	retryfuseAdaptive = func() loadClient {
		return retryfuseLoad("retryfuse-adaptive", func(t *retryfuse.Transport) {
			t.Load.Adaptive, t.Load.SlowStart, t.Load.Throttle.On, t.Load.Pace = true, time.Second, true, true
		})
	}
	failsafeLimiter = func() loadClient {
		return failsafeLoad("failsafe-limiter", adaptivelimiter.NewWithDefaults[*http.Response]())
	}
	failsafeThrottler = func() loadClient {
		return failsafeLoad("failsafe-throttler", adaptivethrottler.NewBuilder[*http.Response]().HandleIf(rejected).Build())
	}
)

// plainRT is the plain retry loop.
type plainRT struct{ base http.RoundTripper }

func (p *plainRT) RoundTrip(req *http.Request) (*http.Response, error) {
	var (
		resp *http.Response
		err  error
	)
	for i := range attempts {
		if i > 0 {
			d := time.Duration(rand.Int64N(int64(backoff << (i - 1))))
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-req.Context().Done():
				t.Stop()
				return nil, req.Context().Err()
			}
		}
		ctx, cancel := context.WithTimeout(req.Context(), attemptTimeout)
		resp, err = p.base.RoundTrip(req.WithContext(ctx))
		if err == nil && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			resp.Body = cancelOnClose{resp.Body, cancel}
			return resp, nil
		}
		if err == nil && i < attempts-1 {
			_ = resp.Body.Close()
		}
		if err == nil {
			resp.Body = cancelOnClose{resp.Body, cancel}
		} else {
			cancel()
		}
		if req.Context().Err() != nil {
			break
		}
	}
	return resp, err
}

type cancelOnClose struct {
	body interface {
		Read([]byte) (int, error)
		Close() error
	}
	cancel context.CancelFunc
}

func (c cancelOnClose) Read(p []byte) (int, error) { return c.body.Read(p) }
func (c cancelOnClose) Close() error {
	err := c.body.Close()
	c.cancel()
	return err
}

// rotate returns cs in an order that starts at the round's place.
func rotate(cs []func() loadClient, round int) []func() loadClient {
	k := round % len(cs)
	return append(append([]func() loadClient{}, cs[k:]...), cs[:k]...)
}

var round = time.Now().UnixNano()

// BenchmarkOverload: a dependency of 8 workers × 10 ms (800/s) with an
// unbounded FIFO queue, offered Poisson arrivals at 2× its capacity for 5 s,
// then 0.5× for 5 s; each client in turn against a fresh one. Per client:
// goodput (calls completed with a 200 within their deadline, per second)
// during the 2× and after it, the p99 of the successful calls during the
// 2×, the share of the work done for callers who had gone (during the
// 2×, and after it), the calls refused locally (during, after), and how
// long after the overload the calls arriving succeed (97% of each 100 ms
// of arrivals). "unloaded" is bare net/http at 0.5× alone, for the
// unloaded p99. One iteration is one whole run: use -benchtime 1x.
func BenchmarkOverload(b *testing.B) {
	const (
		workers  = 8
		service  = 10 * time.Millisecond
		capacity = 800.0
		over     = 5 * time.Second
		after    = 5 * time.Second
	)
	clients := []func() loadClient{plainLoop, retryfuseBudgets, retryfuseDefault, retryfuseStatic, retryfuseAdaptive, failsafeLimiter, failsafeThrottler}
	for range b.N {
		start := time.Now()
		dep := newQueueDep(b, start, time.Second, workers, service)
		c := loadClient{"unloaded", newBase(), nil, func(error) bool { return false }}
		rec := openLoop(c.doer(), dep.URL, start, []phase{{capacity / 2, 2 * time.Second}}, deadline, 1)
		unloaded := p99OK(rec.in(500*time.Millisecond, 2*time.Second))
		b.Run("unloaded", func(b *testing.B) { b.ReportMetric(ms(unloaded), "p99-ms"); b.ReportMetric(0, "ns/op") })

		for i, mk := range rotate(clients, int(round)) {
			c := mk()
			start := time.Now()
			dep := newQueueDep(b, start, over+after+time.Second, workers, service)
			rec := openLoop(c.doer(), dep.URL, start, []phase{{2 * capacity, over}, {capacity / 2, after}}, deadline, uint64(i)+2)
			c.base.CloseIdleConnections()
			during, later := rec.in(0, over), rec.in(over, over+after)
			end := over + after
			b.Run(c.name, func(b *testing.B) {
				b.ReportMetric(float64(rec.completedOK(0, over))/over.Seconds(), "goodput-2x/s")
				b.ReportMetric(ms(p99OK(during)), "p99-2x-ms")
				b.ReportMetric(share(dep.wasted.sum(0, over), dep.done.sum(0, over)), "wasted-2x-%")
				b.ReportMetric(share(dep.wasted.sum(over, end), dep.done.sum(over, end)), "wasted-after-%")
				b.ReportMetric(float64(dep.received.sum(0, over))/over.Seconds(), "received-2x/s")
				b.ReportMetric(100*refusedShare(during), "refused-2x-%")
				b.ReportMetric(100*refusedShare(later), "refused-after-%")
				b.ReportMetric(float64(rec.completedOK(over, end))/after.Seconds(), "goodput-after/s")
				b.ReportMetric(ms(rec.recovery(over, end, 0.97)), "recovery-ms")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkOverloadHealthy: the dependency of BenchmarkOverload at 0.5×
// its capacity for 3 s, through retryfuse without the controls of load,
// with its defaults (the throttle) and with AdaptiveInFlight: the calls
// refused locally, which should be none, and the p99.
func BenchmarkOverloadHealthy(b *testing.B) {
	const (
		workers  = 8
		service  = 10 * time.Millisecond
		capacity = 800.0
		lasts    = 3 * time.Second
	)
	clients := []func() loadClient{retryfuseBudgets, retryfuseDefault, retryfuseAdaptive}
	for range b.N {
		for i, mk := range rotate(clients, int(round)) {
			c := mk()
			start := time.Now()
			dep := newQueueDep(b, start, lasts+time.Second, workers, service)
			rec := openLoop(c.doer(), dep.URL, start, []phase{{capacity / 2, lasts}}, deadline, uint64(i)+40)
			c.base.CloseIdleConnections()
			refused := 0
			for _, cl := range rec.calls {
				if cl.refused {
					refused++
				}
			}
			b.Run(c.name, func(b *testing.B) {
				b.ReportMetric(float64(refused), "refused-calls")
				b.ReportMetric(float64(len(rec.calls)), "calls")
				b.ReportMetric(ms(p99OK(rec.calls)), "p99-ms")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkOverloadBurst: the dependency of BenchmarkOverload at 0.5× its
// capacity, with a burst at 2× for 200 ms a second in, then 0.5× again for
// 800 ms. Its queue absorbs the burst within the callers' deadline: the
// calls that arrive in the burst all succeed without a limit, while a
// learnt limit refuses some of them. Per client: the share of the burst's
// calls that succeeded, and the calls refused.
func BenchmarkOverloadBurst(b *testing.B) {
	const (
		workers  = 8
		service  = 10 * time.Millisecond
		capacity = 800.0
		burst    = 200 * time.Millisecond
	)
	clients := []func() loadClient{retryfuseBudgets, retryfuseDefault, retryfuseAdaptive}
	for range b.N {
		for i, mk := range rotate(clients, int(round)) {
			c := mk()
			start := time.Now()
			dep := newQueueDep(b, start, 3*time.Second, workers, service)
			rec := openLoop(c.doer(), dep.URL, start, []phase{{capacity / 2, time.Second}, {2 * capacity, burst}, {capacity / 2, 800 * time.Millisecond}}, deadline, uint64(i)+60)
			c.base.CloseIdleConnections()
			during := rec.in(time.Second, time.Second+burst)
			ok, refused := 0, 0
			for _, cl := range during {
				if cl.ok {
					ok++
				}
				if cl.refused {
					refused++
				}
			}
			b.Run(c.name, func(b *testing.B) {
				b.ReportMetric(100*float64(ok)/float64(max(1, len(during))), "burst-ok-%")
				b.ReportMetric(float64(refused), "burst-refused")
				b.ReportMetric(ms(p99OK(during)), "burst-p99-ms")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkOverloadQuota: a dependency that accepts at most 400 requests
// a second (serving each in 10 ms) and answers the rest with 429 at once,
// offered 2× that for 5 s, then 0.5× for 5 s. Per client: what reached it
// during the 2×, as a multiple of what it accepts (reach-x), the goodput
// then as a share of it (goodput-x), the calls refused locally after the
// overload, and how long after it the calls arriving succeed; what it
// received per request it served during the 2× (received-per-accepted),
// and the p99 of the calls served during the 2× and after it.
func BenchmarkOverloadQuota(b *testing.B) {
	const (
		quota   = 400.0
		service = 10 * time.Millisecond
		over    = 5 * time.Second
		after   = 5 * time.Second
	)
	clients := []func() loadClient{plainLoop, retryfuseBudgets, retryfuseDefault, retryfuseAdaptive, failsafeThrottler, failsafeLimiter}
	for range b.N {
		for i, mk := range rotate(clients, int(round)) {
			c := mk()
			start := time.Now()
			dep := newQuotaDep(b, start, over+after+time.Second, quota, service)
			rec := openLoop(c.doer(), dep.URL, start, []phase{{2 * quota, over}, {quota / 2, after}}, deadline, uint64(i)+20)
			c.base.CloseIdleConnections()
			end := over + after
			b.Run(c.name, func(b *testing.B) {
				b.ReportMetric(float64(dep.received.sum(0, over))/(quota*over.Seconds()), "reach-x")
				b.ReportMetric(float64(rec.completedOK(0, over))/(quota*over.Seconds()), "goodput-x")
				b.ReportMetric(float64(dep.received.sum(0, over))/float64(max(1, dep.done.sum(0, over))), "received-per-accepted")
				b.ReportMetric(ms(p99OK(rec.in(0, over))), "p99-2x-ms")
				b.ReportMetric(ms(p99OK(rec.in(over, end))), "p99-after-ms")
				b.ReportMetric(100*refusedShare(rec.in(over, end)), "refused-after-%")
				b.ReportMetric(100*refusedShare(rec.in(over+time.Second, end)), "refused-late-%")
				b.ReportMetric(ms(rec.recovery(over, end, 0.97)), "recovery-ms")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkOverloadRecovery: 200 callers, each calling back to back (and
// pausing 20 ms after a failure), against the dependency of 8 workers ×
// 10 ms, which is up for 1 s, down (503 at once) for 2 s, then back for
// 2 s. Per client: the most requests that reached it in any 100 ms of the
// first second after it came back, as a multiple of what it serves in
// 100 ms (peak-x), and the goodput in that second as a share of its
// capacity (goodput-x).
func BenchmarkOverloadRecovery(b *testing.B) {
	const (
		workers  = 8
		service  = 10 * time.Millisecond
		capacity = 800.0
		callers  = 200
		warm     = time.Second
		down     = 2 * time.Second
		back     = 2 * time.Second
	)
	var closed atomic.Int64 // when the breaker last closed, in unix nanoseconds
	breakerClient := func() loadClient {
		return retryfuseLoad("retryfuse-adaptive-breaker", func(t *retryfuse.Transport) {
			t.Load.Adaptive = true
			t.Brake.Breaker, _ = breaker.New(breaker.Settings{OpenTimeout: 100 * time.Millisecond})
			t.Hooks.BreakerChange = func(i breaker.Change) {
				if i.To == breaker.Closed {
					closed.Store(i.At.UnixNano())
				}
			}
		})
	}
	clients := []func() loadClient{plainLoop, retryfuseDefault, retryfuseAdaptive, breakerClient, failsafeLimiter}
	for range b.N {
		for _, mk := range rotate(clients, int(round)) {
			c := mk()
			closed.Store(0)
			start := time.Now()
			dep := newQueueDep(b, start, warm+down+back+time.Second, workers, service)
			stop := make(chan struct{})
			go func() {
				time.Sleep(warm)
				dep.down.Store(true)
				time.Sleep(down)
				dep.down.Store(false)
				time.Sleep(back)
				close(stop)
			}()
			rec := closedLoop(c.doer(), dep.URL, start, callers, deadline, 20*time.Millisecond, stop)
			c.base.CloseIdleConnections()
			up := warm + down
			b.Run(c.name, func(b *testing.B) {
				b.ReportMetric(float64(dep.received.maxIn(up, up+time.Second))/(capacity*bucket.Seconds()), "peak-x")
				b.ReportMetric(float64(rec.completedOK(up, up+time.Second))/capacity, "goodput-x")
				b.ReportMetric(float64(rec.completedOK(warm/2, warm))/(capacity/2), "goodput-warm-x")
				if at := time.Unix(0, closed.Load()).Sub(start); at > up {
					// With a breaker: the second after it closed, and how long
					// after the dependency came back that was.
					b.ReportMetric(float64(rec.completedOK(at, at+time.Second))/capacity, "goodput-close-x")
					b.ReportMetric(float64(dep.received.maxIn(at, at+time.Second))/(capacity*bucket.Seconds()), "peak-close-x")
					b.ReportMetric(ms(at-up), "closed-after-ms")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

func share(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}
