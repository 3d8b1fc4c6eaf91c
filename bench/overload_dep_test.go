package bench

import (
	"context"
	"errors"
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

	"golang.org/x/time/rate"
)

// The dependencies and the load of the overload comparison (overload_test.go):
// a dependency with a few workers and an unbounded FIFO queue, one that
// accepts at most a rate and answers the rest with 429, and the open-loop
// and closed-loop callers that load them, with what each measured per
// 100 ms bucket.

// bucket is the width of the time buckets everything is counted in.
const bucket = 100 * time.Millisecond

// counts is a series of counters, one per bucket from a start.
type counts struct {
	start time.Time
	n     []atomic.Int64
}

func newCounts(start time.Time, span time.Duration) *counts {
	return &counts{start: start, n: make([]atomic.Int64, int(span/bucket)+20)}
}

func (c *counts) add(t time.Time) {
	i := int(t.Sub(c.start) / bucket)
	if i >= 0 && i < len(c.n) {
		c.n[i].Add(1)
	}
}

// sum counts from..to (from the start).
func (c *counts) sum(from, to time.Duration) int64 {
	var s int64
	for i := int(from / bucket); i < int(to/bucket) && i < len(c.n); i++ {
		s += c.n[i].Load()
	}
	return s
}

// maxIn is the largest bucket in from..to.
func (c *counts) maxIn(from, to time.Duration) int64 {
	var m int64
	for i := int(from / bucket); i < int(to/bucket) && i < len(c.n); i++ {
		m = max(m, c.n[i].Load())
	}
	return m
}

// dependency counts what a dependency received and did, per bucket.
type dependency struct {
	*httptest.Server
	received *counts // requests
	done     *counts // work finished
	wasted   *counts // ... for callers who had gone by then
}

func serve(tb testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
}

// queueDep is a dependency of workers that each take service per request,
// from an unbounded FIFO queue, and finish a request whose caller has gone
// (the work is done, for nobody). While down, it answers 503 at once.
type queueDep struct {
	dependency
	jobs    chan *job
	service time.Duration
	down    atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

type job struct {
	ctx  context.Context
	done chan struct{}
}

func newQueueDep(tb testing.TB, start time.Time, span time.Duration, workers int, service time.Duration) *queueDep {
	d := &queueDep{jobs: make(chan *job, 1<<18), service: service, stop: make(chan struct{})}
	d.received, d.done, d.wasted = newCounts(start, span), newCounts(start, span), newCounts(start, span)
	for range workers {
		d.wg.Add(1)
		go d.work()
	}
	d.Server = serve(tb, d)
	tb.Cleanup(func() { close(d.stop); d.wg.Wait() })
	return d
}

func (d *queueDep) work() {
	defer d.wg.Done()
	for {
		select {
		case <-d.stop:
			return
		case j := <-d.jobs:
			time.Sleep(d.service)
			now := time.Now()
			d.done.add(now)
			if j.ctx.Err() != nil {
				d.wasted.add(now)
			}
			close(j.done)
		}
	}
}

func (d *queueDep) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.received.add(time.Now())
	if d.down.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	j := &job{ctx: r.Context(), done: make(chan struct{})}
	d.jobs <- j
	select {
	case <-j.done:
		_, _ = io.WriteString(w, "ok")
	case <-r.Context().Done():
	}
}

// quotaDep accepts at most a rate (a token bucket with a burst of a tenth
// of a second) and answers the rest with 429 at once; what it accepts
// takes service.
type quotaDep struct {
	dependency
	lim     *rate.Limiter
	service time.Duration
}

func newQuotaDep(tb testing.TB, start time.Time, span time.Duration, perSecond float64, service time.Duration) *quotaDep {
	d := &quotaDep{lim: rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond/10))), service: service}
	d.received, d.done, d.wasted = newCounts(start, span), newCounts(start, span), newCounts(start, span)
	d.Server = serve(tb, d)
	return d
}

func (d *quotaDep) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	d.received.add(now)
	if !d.lim.AllowN(now, 1) {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	t := time.NewTimer(d.service)
	defer t.Stop()
	select {
	case <-t.C:
		d.done.add(time.Now())
		_, _ = io.WriteString(w, "ok")
	case <-r.Context().Done():
	}
}

// phase is a stretch of open-loop arrivals at a rate.
type phase struct {
	perSecond float64
	lasts     time.Duration
}

// call is what one call measured.
type call struct {
	at      time.Duration // arrival, from the start
	took    time.Duration
	ok      bool // a 200 within the deadline
	refused bool // refused by the client before anything was sent
}

// record gathers the calls of a run.
type record struct {
	mu    sync.Mutex
	calls []call
}

func (r *record) add(c call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

// doer makes one call; refused tells a local refusal by its error.
type doer struct {
	client  *http.Client
	refused func(error) bool
}

// do sends a GET with the deadline and records it.
func (d doer) do(url string, deadline time.Duration, start time.Time, rec *record) bool {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := d.client.Do(req)
	ok := false
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		ok = resp.StatusCode == http.StatusOK && ctx.Err() == nil
	}
	c := call{at: began.Sub(start), took: time.Since(began), ok: ok}
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			err = ue.Unwrap() // *url.Error
		}
		c.refused = d.refused(err)
	}
	rec.add(c)
	return ok
}

// openLoop sends calls at the phases' rates, Poisson arrivals drawn from
// seed, each with deadline, starting at start; it returns when every call
// has ended.
func openLoop(d doer, url string, start time.Time, phases []phase, deadline time.Duration, seed uint64) *record {
	rnd := rand.New(rand.NewPCG(seed, seed))
	var at []time.Duration
	var from time.Duration
	for _, p := range phases {
		for t := from; ; {
			t += time.Duration(rnd.ExpFloat64() / p.perSecond * float64(time.Second))
			if t >= from+p.lasts {
				break
			}
			at = append(at, t)
		}
		from += p.lasts
	}
	rec := &record{calls: make([]call, 0, len(at))}
	var wg sync.WaitGroup
	for i := 0; i < len(at); {
		now := time.Since(start)
		for ; i < len(at) && at[i] <= now; i++ {
			wg.Go(func() { d.do(url, deadline, start, rec) })
		}
		time.Sleep(500 * time.Microsecond)
	}
	wg.Wait()
	return rec
}

// closedLoop runs callers that call back to back until stop, each pausing
// pause after a call that failed.
func closedLoop(d doer, url string, start time.Time, callers int, deadline, pause time.Duration, stop <-chan struct{}) *record {
	rec := &record{}
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !d.do(url, deadline, start, rec) {
					t := time.NewTimer(pause)
					select {
					case <-t.C:
					case <-stop:
						t.Stop()
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return rec
}

// in returns the calls that arrived in from..to.
func (r *record) in(from, to time.Duration) []call {
	var out []call
	for _, c := range r.calls {
		if c.at >= from && c.at < to {
			out = append(out, c)
		}
	}
	return out
}

// completedOK counts the calls that succeeded and ended in from..to.
func (r *record) completedOK(from, to time.Duration) int {
	n := 0
	for _, c := range r.calls {
		if end := c.at + c.took; c.ok && end >= from && end < to {
			n++
		}
	}
	return n
}

// p99OK is the 99th percentile of the latency of the calls that succeeded.
func p99OK(cs []call) time.Duration {
	var took []time.Duration
	for _, c := range cs {
		if c.ok {
			took = append(took, c.took)
		}
	}
	if len(took) == 0 {
		return 0
	}
	slices.Sort(took)
	return took[len(took)*99/100]
}

// refusedShare is the share of the calls refused by the client.
func refusedShare(cs []call) float64 {
	if len(cs) == 0 {
		return 0
	}
	n := 0
	for _, c := range cs {
		if c.refused {
			n++
		}
	}
	return float64(n) / float64(len(cs))
}

// recovery is how long after from the calls arriving succeed: the
// earliest time after which, in every half second of arrivals (sliding by
// 100 ms) up to to, at least share of the calls succeeded; to-from when
// none is.
func (r *record) recovery(from, to time.Duration, share float64) time.Duration {
	const span = 500 * time.Millisecond
	last := time.Duration(-1)
	for b := from; b+span <= to; b += bucket {
		cs := r.in(b, b+span)
		ok := 0
		for _, c := range cs {
			if c.ok {
				ok++
			}
		}
		if len(cs) > 0 && float64(ok) < share*float64(len(cs)) {
			last = b
		}
	}
	switch {
	case last < 0:
		return 0
	case last+span >= to:
		return to - from
	}
	return last + bucket - from
}
