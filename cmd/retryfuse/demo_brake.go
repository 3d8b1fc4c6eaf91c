package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
)

// brakeResults: a dependency that fails for a while, then recovers, under
// a steady arrival of calls. Three runs go side by side, each against a
// server of its own: the plain loop, retryfuse with its budget only, and
// retryfuse with a Breaker as well.
type brakeResults struct {
	DownFor     time.Duration // the dependency failed from the start for this long
	RunFor      time.Duration // calls arrived for this long
	Every       time.Duration // one call arrived every so often
	OpenTimeout time.Duration // the breaker's open interval
	Plain       brakeSide
	Budget      brakeSide // retryfuse without a breaker
	Breaker     brakeSide // retryfuse with a breaker
	// Transitions are the breaker's changes of state, from the
	// BreakerChange hook, in order.
	Transitions []brakeTransition
}

// brakeSide is what one run measured.
type brakeSide struct {
	Calls     int64 // calls made
	SentDown  int64 // requests the dependency received while it was down
	SentUp    int64 // ... and after it recovered
	FastFails int64 // calls refused by the open breaker without sending
	// FirstOK is when a caller first got a 200, from the start; 0 if never.
	FirstOK time.Duration
}

type brakeTransition struct {
	At       time.Duration // from the start
	From, To breaker.State
}

// flaky fails with 503 until start+downFor, then answers 200.
type flaky struct {
	start    time.Time
	downFor  time.Duration
	sentDown atomic.Int64
	sentUp   atomic.Int64
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if time.Since(f.start) < f.downFor {
		f.sentDown.Add(1)
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	f.sentUp.Add(1)
	_, _ = w.Write([]byte("ok\n"))
}

// runBrake runs the three sides at once.
func runBrake(srv *servers, cfg demoConfig) (brakeResults, error) {
	res := brakeResults{DownFor: cfg.downFor, RunFor: cfg.runFor, Every: cfg.every, OpenTimeout: cfg.openTimeout}
	brk, err := breaker.New(breaker.Settings{OpenTimeout: cfg.openTimeout})
	if err != nil {
		return res, err
	}
	start := time.Now()
	deps := [3]*flaky{}
	urls := [3]string{}
	for i, name := range [3]string{"brake (plain)", "brake (retryfuse, budget only)", "brake (retryfuse, breaker)"} {
		deps[i] = &flaky{start: start, downFor: cfg.downFor}
		s, err := srv.start(name, deps[i])
		if err != nil {
			return res, err
		}
		urls[i] = s.URL
	}

	plain := srv.newPlain(demoAttemptTimeout)
	budgetOnly := &http.Client{Transport: srv.newFuse(demoAttemptTimeout)}
	braked := srv.newFuse(demoAttemptTimeout)
	braked.Brake.Breaker = brk
	var mu sync.Mutex
	braked.Hooks.BreakerChange = func(c breaker.Change) {
		mu.Lock()
		res.Transitions = append(res.Transitions, brakeTransition{At: c.At.Sub(start), From: c.From, To: c.To})
		mu.Unlock()
	}
	brakedClient := &http.Client{Transport: braked}

	sides := [3]*brakeSide{&res.Plain, &res.Budget, &res.Breaker}
	calls := [3]func(context.Context, string) (*http.Response, error){
		func(ctx context.Context, url string) (*http.Response, error) { return plain.do(ctx, getter(url)) },
		clientGet(budgetOnly),
		clientGet(brakedClient),
	}
	var wg sync.WaitGroup
	for i := range sides {
		wg.Go(func() {
			arrive(start, cfg, sides[i], func() (*http.Response, error) { return calls[i](context.Background(), urls[i]) })
		})
	}
	wg.Wait()
	for i, side := range sides {
		side.SentDown, side.SentUp = deps[i].sentDown.Load(), deps[i].sentUp.Load()
	}
	return res, nil
}

func clientGet(c *http.Client) func(context.Context, string) (*http.Response, error) {
	return func(ctx context.Context, url string) (*http.Response, error) {
		req, err := getter(url)(ctx)
		if err != nil {
			return nil, err
		}
		return c.Do(req)
	}
}

// arrive starts one call every cfg.every for cfg.runFor, whether or not
// earlier calls have finished (as requests reach a service), and waits for
// them all.
func arrive(start time.Time, cfg demoConfig, side *brakeSide, call func() (*http.Response, error)) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		calls   atomic.Int64
		fast    atomic.Int64
		firstOK time.Duration
	)
	tick := time.NewTicker(cfg.every)
	defer tick.Stop()
	for time.Since(start) < cfg.runFor {
		calls.Add(1)
		wg.Go(func() {
			resp, err := call()
			if errors.Is(err, breaker.ErrOpen) {
				fast.Add(1)
			}
			if err == nil && resp.StatusCode == http.StatusOK {
				at := time.Since(start)
				mu.Lock()
				if firstOK == 0 || at < firstOK {
					firstOK = at
				}
				mu.Unlock()
			}
			drainClose(resp)
		})
		<-tick.C
	}
	wg.Wait()
	side.Calls, side.FastFails, side.FirstOK = calls.Load(), fast.Load(), firstOK
}
