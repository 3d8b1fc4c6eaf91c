// Command budget shows one budget.Ratio shared by 50 concurrent callers of
// a dependency that answers every request with 503.
//
// Each caller would send up to 3 attempts: 150 requests in all. The shared
// budget grants retries only in proportion to requests (10% by default)
// plus a small reserve (10 per 10-second window by default), so the server
// receives at most 50 + 5 + 10 = 65. A caller whose retry is refused gets
// the last 503 back at once (GiveUp with ErrBudgetExhausted). Which callers
// get the retries depends on scheduling; the bound does not.
//
// Run it with:
//
//	go run ./examples/budget
package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
)

const callers = 50

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "budget:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	var perCaller [callers]atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if n, err := strconv.Atoi(r.Header.Get("X-Caller")); err == nil && n >= 0 && n < callers {
			perCaller[n].Add(1)
		}
		rw.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	budget, err := budget.NewRatio(budget.RatioConfig{}) // 10%, reserve 1/s, 10s window
	if err != nil {
		return err
	}
	var byBudget, byAttempts atomic.Int32
	rt := &retryfuse.Transport{
		Retry: retryfuse.RetryPolicy{
			Budget:         budget, // one budget for every caller (and every scope)
			InitialBackoff: 5 * time.Millisecond,
			MaxBackoff:     20 * time.Millisecond,
		},
		Hooks: retryfuse.Hooks{
			GiveUp: func(i retryfuse.GiveUpInfo) {
				switch {
				case errors.Is(i.Reason, retryfuse.ErrBudgetExhausted):
					byBudget.Add(1)
				case errors.Is(i.Reason, retryfuse.ErrAttemptsExhausted):
					byAttempts.Add(1)
				}
			},
		},
	}
	defer rt.CloseIdleConnections()
	client := &http.Client{Transport: rt}

	var wg sync.WaitGroup
	errs := make([]error, callers)
	start := make(chan struct{})
	for n := range callers {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/search", nil)
			if err != nil {
				errs[n] = err
				return
			}
			req.Header.Set("X-Caller", strconv.Itoa(n))
			<-start // all callers fail at the same instant
			resp, err := client.Do(req)
			if err != nil {
				errs[n] = err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				errs[n] = fmt.Errorf("caller %d: got %s, want the last 503", n, resp.Status)
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	fmt.Fprintf(w, "%d callers, 3 attempts each at most, one shared budget.Ratio (%v)\n", callers, time.Since(began).Round(time.Millisecond))
	fmt.Fprintln(w, "requests the server received, per caller:")
	total, hist := 0, map[int32]int{}
	for n := range callers {
		got := perCaller[n].Load()
		total += int(got)
		hist[got]++
		fmt.Fprintf(w, " %2d:%d", n, got)
		if n%10 == 9 {
			fmt.Fprintln(w)
		}
	}
	for k := int32(1); k <= 3; k++ {
		fmt.Fprintf(w, "callers that sent %d request(s): %d\n", k, hist[k])
	}
	fmt.Fprintf(w, "server received %d requests in all (without a budget: %d)\n", total, 3*callers)
	fmt.Fprintf(w, "calls stopped by the budget: %d, by running out of attempts: %d\n", byBudget.Load(), byAttempts.Load())
	s := budget.Snapshot()
	fmt.Fprintf(w, "budget snapshot: requests=%d retries=%d refused=%d available=%.1f\n", s.Requests, s.Retries, s.Refused, s.Available)

	switch {
	case s.Requests != callers || total != callers+int(s.Retries):
		return fmt.Errorf("server got %d requests, budget recorded %d requests and %d retries", total, s.Requests, s.Retries)
	case s.Retries < 10 || s.Retries > 15:
		return fmt.Errorf("budget granted %d retries, want 10 (the reserve) to 15 (plus 10%% of 50)", s.Retries)
	case hist[1]+hist[2]+hist[3] != callers || int(byBudget.Load()+byAttempts.Load()) != callers:
		return fmt.Errorf("per-caller counts %v, give-ups %d+%d: every caller should send 1 to 3 requests and give up once",
			hist, byBudget.Load(), byAttempts.Load())
	}
	return nil
}
