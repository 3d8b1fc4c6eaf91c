package main

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
)

// stormResults: many callers against a dependency that fails every request.
type stormResults struct {
	Callers     int
	PlainSent   int64 // requests the dependency received from the plain loop
	FuseSent    int64 // ... and from retryfuse
	PlainGot503 int64 // callers that got the 503 back (the others, an error)
	FuseGot503  int64
	// FuseThrottled are the callers refused before anything was sent
	// (ReasonName "throttled"): none with the defaults, whose throttle is
	// off unless LoadPolicy.Throttle asks for it.
	FuseThrottled int64
	PlainElapsed  time.Duration
	FuseElapsed   time.Duration
	// FuseBudget is the retryfuse side's per-host ratio budget at the end.
	FuseBudget budget.Snapshot
}

// PlainPerCaller and FusePerCaller are the amplification: requests the
// dependency received per caller.
func (s stormResults) PlainPerCaller() float64 { return float64(s.PlainSent) / float64(s.Callers) }
func (s stormResults) FusePerCaller() float64  { return float64(s.FuseSent) / float64(s.Callers) }

// runStorm sends cfg.callers concurrent GETs, once through the plain loop
// and once through retryfuse, each against its own always-503 server.
func runStorm(srv *servers, cfg demoConfig) (stormResults, error) {
	res := stormResults{Callers: cfg.callers}
	plainDep, fuseDep := &failing{}, &failing{}
	plainSrv, err := srv.start("storm (plain)", plainDep)
	if err != nil {
		return res, err
	}
	fuseSrv, err := srv.start("storm (retryfuse)", fuseDep)
	if err != nil {
		return res, err
	}

	plain := srv.newPlain(demoAttemptTimeout)
	res.PlainElapsed = together(cfg.callers, func() {
		resp, err := plain.do(context.Background(), getter(plainSrv.URL))
		got503(&res.PlainGot503, resp, err)
	})
	res.PlainSent = plainDep.requests.Load()

	// The Transport's default: one budget.Ratio with default settings per
	// host. It is made here, through NewBudget, only to read its Snapshot
	// afterwards. Concurrent first calls may each ask NewBudget for the
	// scope's budget: each gets the same one.
	shared, err := budget.NewRatio(budget.RatioConfig{})
	if err != nil {
		return res, err
	}
	fuse := srv.newFuse(demoAttemptTimeout)
	fuse.Retry.NewBudget = func(string) (budget.Budget, error) { return shared, nil }
	client := &http.Client{Transport: fuse}
	res.FuseElapsed = together(cfg.callers, func() {
		req, err := getter(fuseSrv.URL)(context.Background())
		if err != nil {
			return
		}
		resp, err := client.Do(req)
		if retryfuse.ReasonName(err) == "throttled" {
			atomic.AddInt64(&res.FuseThrottled, 1)
		}
		got503(&res.FuseGot503, resp, err)
	})
	res.FuseSent = fuseDep.requests.Load()
	res.FuseBudget = shared.Snapshot()
	return res, nil
}

// got503 counts a 503 response and discards it.
func got503(n *int64, resp *http.Response, err error) {
	if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
		atomic.AddInt64(n, 1)
	}
	drainClose(resp)
}

// together runs n callers of f released at the same instant and returns
// how long they took.
func together(n int, f func()) time.Duration {
	var (
		ready, done sync.WaitGroup
		start       = make(chan struct{})
	)
	ready.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			f()
		}()
	}
	ready.Wait()
	began := time.Now()
	close(start)
	done.Wait()
	return time.Since(began)
}

// getter makes GET requests for url.
func getter(url string) func(context.Context) (*http.Request, error) {
	return func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	}
}
