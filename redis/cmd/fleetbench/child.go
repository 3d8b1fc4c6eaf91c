package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
	retryfuseredis "github.com/retryfuse/retryfuse/redis"
)

// report is what one process sends back, as one JSON line on stdout.
type report struct {
	Calls  int64   `json:"calls"`
	Errors int64   `json:"errors"`
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	// Measured counts only the calls started after -measure-from.
	Measured int `json:"measured"`
	// Unavailable and Recovered count the budget's reports of Redis's
	// state (Hooks.EvidenceUnavailable).
	Unavailable int64 `json:"unavailable"`
	Recovered   int64 `json:"recovered"`
}

// child runs callers GETs against url for d, through one Transport with a
// Redis ratio budget per scope (or an in-memory one), and prints a report.
func child(cfg config) error {
	var newBudget func(string) (budget.Budget, error)
	var closeBudgets func() error
	switch cfg.budget {
	case "memory":
		newBudget = func(string) (budget.Budget, error) { return budget.NewRatio(cfg.ratio) }
		closeBudgets = func() error { return nil }
	case "redis":
		rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		budgets, err := retryfuseredis.RatioBudgets(rdb, cfg.ratio, retryfuseredis.BudgetOptions{
			Prefix: cfg.prefix, SyncInterval: cfg.interval, MaxLease: cfg.maxLease,
			RedisLogger: discardLogger(),
		})
		if err != nil {
			return err
		}
		newBudget = budgets.New
		closeBudgets = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return budgets.Close(ctx)
		}
	default:
		return fmt.Errorf("unknown budget %q", cfg.budget)
	}
	var unavailable, recovered atomic.Int64
	tr := &retryfuse.Transport{
		Retry: retryfuse.RetryPolicy{
			MaxAttempts:    cfg.attempts,
			NewBudget:      newBudget,
			InitialBackoff: time.Microsecond,
			MaxBackoff:     time.Microsecond,
		},
		Load: retryfuse.LoadPolicy{
			Throttle: retryfuse.ThrottlePolicy{
				Disable: true,
			},
		},
		// the fleet's budgets alone bound what is sent
		Hooks: retryfuse.Hooks{EvidenceUnavailable: func(i retryfuse.EvidenceUnavailableInfo) {
			if errors.Is(i.Err, retryfuseredis.ErrRecovered) {
				recovered.Add(1)
			} else {
				unavailable.Add(1)
			}
		}},
	}
	if err := tr.Validate(); err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	start := time.Now()
	measureFrom := start.Add(cfg.measureFrom)
	var (
		mu      sync.Mutex
		rep     report
		samples []time.Duration
	)
	var wg sync.WaitGroup
	for range cfg.callers {
		wg.Go(func() {
			var calls, errs int64
			var mine []time.Duration
			for time.Since(start) < cfg.duration {
				t0 := time.Now()
				resp, err := client.Get(cfg.url)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				} else {
					errs++
				}
				if t0.After(measureFrom) {
					mine = append(mine, time.Since(t0))
				}
				calls++
			}
			mu.Lock()
			rep.Calls += calls
			rep.Errors += errs
			samples = append(samples, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := closeBudgets(); err != nil && !errors.Is(err, retryfuseredis.ErrUnavailable) {
		fmt.Fprintln(os.Stderr, "fleetbench: Close:", err)
	}
	rep.Unavailable, rep.Recovered = unavailable.Load(), recovered.Load()
	slices.Sort(samples)
	rep.Measured = len(samples)
	rep.P50us = micros(quantile(samples, 0.50))
	rep.P99us = micros(quantile(samples, 0.99))
	return json.NewEncoder(os.Stdout).Encode(rep)
}

func quantile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// readReport reads a child's report from its output.
func readReport(out string) (report, error) {
	var r report
	lines := strings.Split(strings.TrimSpace(out), "\n")
	err := json.Unmarshal([]byte(lines[len(lines)-1]), &r)
	return r, err
}
