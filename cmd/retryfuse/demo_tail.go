package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
)

// The tail-latency scenario: sequential GETs to a dependency that answers
// at once but for one request in every tailSlowEvery (at a seeded random
// place in each run of tailSlowEvery: exactly 5%), which it holds.
const (
	tailCalls      = 200
	tailSlowEvery  = 20
	tailSlowFor    = 200 * time.Millisecond
	tailHedgeDelay = 20 * time.Millisecond
	// tailQuantile derives the hedge delay from the observed latency: the
	// 95th percentile of the dependency's answers: hedge the slowest 5%.
	tailQuantile = 0.95
	tailSeed     = 7
)

// tailResults: the plain client against retryfuse hedging with a fixed
// delay and with a delay derived from the observed latency, each against a
// server of its own with the same seed.
type tailResults struct {
	Calls   int
	Plain   tailSide
	Fixed   tailSide
	Derived tailSide
}

// tailSide is what one run measured.
type tailSide struct {
	P50, P99 time.Duration
	Sent     int64 // requests the server received
	Failed   int   // calls without a 200
}

// Extra is the share of requests sent beyond one per call.
func (s tailSide) Extra(calls int) float64 { return float64(s.Sent-int64(calls)) / float64(calls) }

// slowTail holds one request in every tailSlowEvery for slowFor (or until
// the client gives up on it) and answers the rest at once.
type slowTail struct {
	mu      sync.Mutex
	rnd     *rand.Rand
	n       int // requests received
	slow    int // the place of the slow one in the current run
	slowFor time.Duration
	sent    atomic.Int64
}

func newSlowTail(seed uint64) *slowTail {
	return &slowTail{rnd: rand.New(rand.NewPCG(seed, seed)), slowFor: tailSlowFor}
}

func (s *slowTail) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.sent.Add(1)
	s.mu.Lock()
	if s.n%tailSlowEvery == 0 {
		s.slow = s.rnd.IntN(tailSlowEvery)
	}
	slow := s.n%tailSlowEvery == s.slow
	s.n++
	s.mu.Unlock()
	if slow {
		t := time.NewTimer(s.slowFor)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	_, _ = w.Write([]byte("ok"))
}

func runTail(srv *servers, calls int) (tailResults, error) {
	res := tailResults{Calls: calls}
	sides := []struct {
		out    *tailSide
		client func() (*http.Client, func())
	}{
		{&res.Plain, func() (*http.Client, func()) {
			base := srv.transport()
			return &http.Client{Transport: base}, base.CloseIdleConnections
		}},
		{&res.Fixed, func() (*http.Client, func()) {
			tr := &retryfuse.Transport{Base: srv.transport(), Hedge: retryfuse.HedgePolicy{Max: 1, Delay: tailHedgeDelay}}
			return &http.Client{Transport: tr}, tr.CloseIdleConnections
		}},
		{&res.Derived, func() (*http.Client, func()) {
			tr := &retryfuse.Transport{Base: srv.transport(), Hedge: retryfuse.HedgePolicy{Max: 1, Delay: tailHedgeDelay, Quantile: tailQuantile}}
			return &http.Client{Transport: tr}, tr.CloseIdleConnections
		}},
	}
	for _, side := range sides {
		dep := newSlowTail(tailSeed)
		s, err := srv.start("slow-tail", dep)
		if err != nil {
			return res, err
		}
		client, closeIdle := side.client()
		*side.out = tailRun(client, s.URL, calls)
		closeIdle()
		side.out.Sent = dep.sent.Load()
	}
	return res, nil
}

// tailRun makes calls sequential GETs and measures their latency.
func tailRun(client *http.Client, url string, calls int) tailSide {
	var side tailSide
	took := make([]time.Duration, 0, calls)
	for range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		began := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			drainClose(resp)
		}
		took = append(took, time.Since(began))
		if err != nil || resp.StatusCode != http.StatusOK {
			side.Failed++
		}
		cancel()
	}
	slices.Sort(took)
	side.P50 = took[len(took)*50/100]
	side.P99 = took[len(took)*99/100]
	return side
}
