package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
)

// The overload scenario: a dependency of overloadWorkers workers that each
// take overloadService per request, behind an unbounded FIFO queue, which
// finishes the requests of callers who have gone (the work is done for
// nobody). Poisson arrivals offer it twice its capacity for overloadFor,
// then half of it for overloadAfter. Three sides at once, each against a
// dependency of its own and the same arrivals: the plain loop, retryfuse
// with a bulkhead set to the right guess, and retryfuse learning the limit
// (Load.Adaptive). Every side makes 3 attempts of at most
// overloadAttempt within the caller's overloadDeadline.
const (
	overloadWorkers  = 4
	overloadService  = 10 * time.Millisecond
	overloadCapacity = float64(overloadWorkers) * float64(time.Second) / float64(overloadService)
	overloadFor      = 1200 * time.Millisecond
	overloadAfter    = 800 * time.Millisecond
	overloadAttempt  = 200 * time.Millisecond
	overloadDeadline = 500 * time.Millisecond
	overloadGuess    = 2 * overloadWorkers    // the bulkhead of the static side
	overloadBucket   = 200 * time.Millisecond // of arrivals, for the recovery
	overloadSeed     = 11
)

// overloadResults: the three sides.
type overloadResults struct {
	Plain, Static, Adaptive overloadSide
}

// overloadSide is what one side measured.
type overloadSide struct {
	Goodput  float64       // calls answered 200 within their deadline, per second, during the overload
	P99      time.Duration // of those calls
	Received int64         // requests the dependency received during the overload
	Done     int64         // requests it finished then
	Wasted   int64         // ... for callers who had gone
	Refused  float64       // share of the calls refused locally during the overload
	After    float64       // ... after it
	// Recovered is how long after the overload the calls arriving
	// succeed again (97% of every 200 ms of arrivals); -1 when not within
	// overloadAfter.
	Recovered time.Duration
}

// WastedShare is the share of the work done for callers who had gone.
func (s overloadSide) WastedShare() float64 {
	if s.Done == 0 {
		return 0
	}
	return float64(s.Wasted) / float64(s.Done)
}

// queueDep is the dependency of the scenario.
type queueDep struct {
	start          time.Time
	jobs           chan overloadJob
	received, done atomic.Int64 // during the overload
	wasted         atomic.Int64
	stop           chan struct{}
	wg             sync.WaitGroup
}

type overloadJob struct {
	ctx  context.Context
	done chan struct{}
}

func newQueueDep(start time.Time) *queueDep {
	d := &queueDep{start: start, jobs: make(chan overloadJob, 1<<16), stop: make(chan struct{})}
	for range overloadWorkers {
		d.wg.Go(d.work)
	}
	return d
}

func (d *queueDep) work() {
	for {
		select {
		case <-d.stop:
			return
		case j := <-d.jobs:
			time.Sleep(overloadService)
			if time.Since(d.start) < overloadFor {
				d.done.Add(1)
				if j.ctx.Err() != nil {
					d.wasted.Add(1)
				}
			}
			close(j.done)
		}
	}
}

func (d *queueDep) close() {
	close(d.stop)
	d.wg.Wait()
}

func (d *queueDep) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if time.Since(d.start) < overloadFor {
		d.received.Add(1)
	}
	j := overloadJob{ctx: r.Context(), done: make(chan struct{})}
	d.jobs <- j
	select {
	case <-j.done:
		_, _ = w.Write([]byte("ok\n"))
	case <-r.Context().Done():
	}
}

// overloadCall is what one call measured.
type overloadCall struct {
	at, took    time.Duration
	ok, refused bool
}

func runOverload(srv *servers) (overloadResults, error) {
	var res overloadResults
	start := time.Now()
	sides := [3]*overloadSide{&res.Plain, &res.Static, &res.Adaptive}
	deps := [3]*queueDep{}
	urls := [3]string{}
	for i, name := range [3]string{"overload (plain)", "overload (retryfuse, Load.MaxInFlight)", "overload (retryfuse, Load.Adaptive)"} {
		deps[i] = newQueueDep(start)
		defer deps[i].close()
		s, err := srv.start(name, deps[i])
		if err != nil {
			return res, err
		}
		urls[i] = s.URL
	}
	base := func() *http.Transport {
		b := srv.transport()
		b.MaxIdleConnsPerHost = 64
		return b
	}
	plain := srv.newPlain(overloadAttempt)
	plain.client = &http.Client{Transport: base()}
	fuse := func(set func(*retryfuse.Transport)) *http.Client {
		tr := &retryfuse.Transport{Base: base(), Retry: retryfuse.RetryPolicy{MaxAttempts: demoAttempts, AttemptTimeout: overloadAttempt}}
		set(tr)
		return &http.Client{Transport: tr}
	}
	static := fuse(func(tr *retryfuse.Transport) { tr.Load.MaxInFlight = overloadGuess })
	adaptive := fuse(func(tr *retryfuse.Transport) { tr.Load.Adaptive = true })
	calls := [3]func(context.Context, string) (*http.Response, error){
		func(ctx context.Context, url string) (*http.Response, error) { return plain.do(ctx, getter(url)) },
		clientGet(static),
		clientGet(adaptive),
	}
	var wg sync.WaitGroup
	for i := range sides {
		wg.Go(func() {
			got := overloadArrivals(start, func(ctx context.Context) (*http.Response, error) { return calls[i](ctx, urls[i]) })
			*sides[i] = summarize(got)
			sides[i].Received, sides[i].Done, sides[i].Wasted = deps[i].received.Load(), deps[i].done.Load(), deps[i].wasted.Load()
		})
	}
	wg.Wait()
	return res, nil
}

// overloadArrivals makes the scenario's calls, at their seeded Poisson
// arrivals, and waits for them all.
func overloadArrivals(start time.Time, call func(context.Context) (*http.Response, error)) []overloadCall {
	rnd := rand.New(rand.NewPCG(overloadSeed, overloadSeed))
	var at []time.Duration
	for _, p := range []struct {
		rate       float64
		from, till time.Duration
	}{{2 * overloadCapacity, 0, overloadFor}, {overloadCapacity / 2, overloadFor, overloadFor + overloadAfter}} {
		for t := p.from; ; {
			t += time.Duration(rnd.ExpFloat64() / p.rate * float64(time.Second))
			if t >= p.till {
				break
			}
			at = append(at, t)
		}
	}
	var (
		mu  sync.Mutex
		got []overloadCall
		wg  sync.WaitGroup
	)
	for i := 0; i < len(at); {
		for now := time.Since(start); i < len(at) && at[i] <= now; i++ {
			wg.Go(func() {
				began := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), overloadDeadline)
				defer cancel()
				resp, err := call(ctx)
				c := overloadCall{at: began.Sub(start), took: time.Since(began)}
				c.ok = err == nil && resp.StatusCode == http.StatusOK && ctx.Err() == nil
				var re *retryfuse.RetryError
				c.refused = errors.Is(err, retryfuse.ErrDeclined) && !errors.As(err, &re)
				drainClose(resp)
				mu.Lock()
				got = append(got, c)
				mu.Unlock()
			})
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	return got
}

// summarize works out a side's figures from its calls.
func summarize(calls []overloadCall) overloadSide {
	var (
		s                    overloadSide
		took                 []time.Duration
		during, after        int
		refused, refusedThen int
	)
	for _, c := range calls {
		if c.at < overloadFor {
			during++
			if c.refused {
				refused++
			}
			if c.ok && c.at+c.took < overloadFor {
				took = append(took, c.took)
			}
		} else {
			after++
			if c.refused {
				refusedThen++
			}
		}
	}
	s.Goodput = float64(len(took)) / overloadFor.Seconds()
	if len(took) > 0 {
		slices.Sort(took)
		s.P99 = took[len(took)*99/100]
	}
	s.Refused = float64(refused) / float64(max(1, during))
	s.After = float64(refusedThen) / float64(max(1, after))
	s.Recovered = recovered(calls)
	return s
}

// recovered is how long after the overload the calls arriving succeed:
// the end of the last bucket of arrivals after it in which fewer than 97%
// did; -1 when the last one is such a bucket.
func recovered(calls []overloadCall) time.Duration {
	const buckets = int(overloadAfter / overloadBucket)
	var n, ok [buckets]int
	for _, c := range calls {
		if c.at < overloadFor {
			continue
		}
		b := min(int((c.at-overloadFor)/overloadBucket), buckets-1)
		n[b]++
		if c.ok {
			ok[b]++
		}
	}
	last := 0
	for b := range buckets {
		if n[b] > 0 && float64(ok[b]) < 0.97*float64(n[b]) {
			last = b + 1
		}
	}
	if last == buckets {
		return -1
	}
	return time.Duration(last) * overloadBucket
}
