package main

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse"
)

// stormResults: many callers against a dependency that fails every request.
type stormResults struct {
	Callers      int
	PlainSent    int64 // requests the dependency received from the plain loop
	FuseSent     int64 // ... and from retryfuse
	PlainElapsed time.Duration
	FuseElapsed  time.Duration
	// FuseBudget is the retryfuse side's per-host ratio budget at the end.
	FuseBudget retryfuse.BudgetSnapshot
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

	plain := newPlain()
	res.PlainElapsed = together(cfg.callers, func() {
		resp, _ := plain.do(context.Background(), getter(plainSrv.URL))
		drainClose(resp)
	})
	res.PlainSent = plainDep.requests.Load()

	// The Transport's default: one RatioBudget with default settings per
	// host. It is created here, through NewBudget, only to read its
	// Snapshot afterwards.
	var (
		mu     sync.Mutex
		budget *retryfuse.RatioBudget
	)
	fuse := newFuse()
	fuse.NewBudget = func(string) (retryfuse.Budget, error) {
		b, err := retryfuse.NewRatioBudget(retryfuse.RatioBudgetConfig{})
		if err == nil {
			mu.Lock()
			budget = b
			mu.Unlock()
		}
		return b, err
	}
	client := &http.Client{Transport: fuse}
	res.FuseElapsed = together(cfg.callers, func() {
		req, err := getter(fuseSrv.URL)(context.Background())
		if err != nil {
			return
		}
		resp, _ := client.Do(req)
		drainClose(resp)
	})
	res.FuseSent = fuseDep.requests.Load()
	mu.Lock()
	if budget != nil {
		res.FuseBudget = budget.Snapshot()
	}
	mu.Unlock()
	return res, nil
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
