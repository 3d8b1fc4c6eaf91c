// Command fleetbench measures the Redis retry budgets with a fleet of
// real processes: P processes, each with C callers and a
// retryfuse.Transport whose per-scope budget is a retryfuseredis ratio
// budget, all sharing one Redis.
//
// It runs three phases:
//
//   - always-503: every call fails, every process asks for retries; it
//     prints the fleet's amplification (requests per call) against the
//     documented bound, and the Redis scripts per second per process;
//   - healthy: the same fleet against a healthy server, with in-memory
//     budgets and with Redis budgets in turn (memory, redis, memory,
//     redis), printing calls per second, latency, and the ratio;
//   - paused: when fleetbench started its own redis-server, it pauses it
//     (SIGSTOP) while the fleet calls the healthy server, and prints the
//     latency added per call.
//
// Usage, from the repository root:
//
//	go run ./redis/cmd/fleetbench [-procs 8] [-callers 4] [-duration 5s] [-redis host:port]
//
// Without -redis (or REDIS_ADDR), it starts a redis-server on loopback.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/budget"
	retryfuseredis "github.com/retryfuse/retryfuse/redis"
)

type config struct {
	procs, callers, attempts int
	rounds                   int
	duration, interval       time.Duration
	duration503              time.Duration
	maxLease                 int
	redisAddr                string
	ratio                    budget.RatioConfig

	// the child's own
	child       bool
	budget, url string
	prefix      string
	measureFrom time.Duration
}

func main() {
	var cfg config
	flag.IntVar(&cfg.procs, "procs", 8, "processes in the fleet")
	flag.IntVar(&cfg.callers, "callers", 4, "concurrent callers per process")
	flag.IntVar(&cfg.attempts, "attempts", 4, "Transport.MaxAttempts")
	flag.IntVar(&cfg.rounds, "rounds", 4, "rounds of the healthy and paused phases")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "length of each run")
	flag.DurationVar(&cfg.duration503, "duration-503", 0, "length of the always-503 run (0: -duration)")
	flag.DurationVar(&cfg.interval, "interval", 0, "BudgetOptions.SyncInterval (0: the default)")
	flag.IntVar(&cfg.maxLease, "max-lease", 0, "BudgetOptions.MaxLease (0: the default)")
	flag.StringVar(&cfg.redisAddr, "redis", os.Getenv("REDIS_ADDR"), "Redis address; empty starts a redis-server on loopback")
	flag.BoolVar(&cfg.child, "child", false, "run as one process of the fleet (internal)")
	flag.StringVar(&cfg.budget, "budget", "redis", "child: redis or memory (internal)")
	flag.StringVar(&cfg.url, "url", "", "child: URL to call (internal)")
	flag.StringVar(&cfg.prefix, "prefix", "", "child: budget key prefix (internal)")
	flag.DurationVar(&cfg.measureFrom, "measure-from", 0, "child: measure latency from this time on (internal)")
	flag.Parse()
	cfg.ratio = budget.RatioConfig{} // the defaults: Ratio 0.1, 1/s reserve, 10s window
	var err error
	if cfg.child {
		err = child(cfg)
	} else {
		err = parent(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// server is a loopback HTTP server that counts its requests.
type server struct {
	srv  *http.Server
	url  string
	hits atomic.Int64
}

func startServer(status int) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{url: "http://" + l.Addr().String() + "/"}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.hits.Add(1)
		w.WriteHeader(status)
		io.WriteString(w, "x")
	})}
	go s.srv.Serve(l)
	return s, nil
}

// fleet runs cfg.procs children with the given budget against url, and
// returns their reports. during, when set, runs in the parent meanwhile.
func fleet(cfg config, budget, url, prefix string, measureFrom time.Duration, during func()) ([]report, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	reps := make([]report, cfg.procs)
	errs := make([]error, cfg.procs)
	var wg sync.WaitGroup
	for i := range cfg.procs {
		wg.Go(func() {
			cmd := exec.Command(self, "-child", "-budget", budget, "-url", url, "-prefix", prefix,
				"-redis", cfg.redisAddr, "-callers", strconv.Itoa(cfg.callers), "-attempts", strconv.Itoa(cfg.attempts),
				"-duration", cfg.duration.String(), "-interval", cfg.interval.String(),
				"-max-lease", strconv.Itoa(cfg.maxLease), "-measure-from", measureFrom.String())
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("process %d: %w", i, err)
				return
			}
			reps[i], errs[i] = readReport(string(out))
		})
	}
	if during != nil {
		during()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return reps, nil
}

// sum adds the reports up; the latencies are the worst process's.
func sum(reps []report) report {
	var t report
	for _, r := range reps {
		t.Calls += r.Calls
		t.Errors += r.Errors
		t.Measured += r.Measured
		t.Unavailable += r.Unavailable
		t.Recovered += r.Recovered
		t.P50us = max(t.P50us, r.P50us)
		t.P99us = max(t.P99us, r.P99us)
	}
	return t
}

func parent(cfg config) error {
	var own *redisServer
	if cfg.redisAddr == "" {
		var err error
		if own, err = startRedis(); err != nil {
			return err
		}
		defer own.stop()
		cfg.redisAddr = own.addr
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr})
	defer rdb.Close()
	failing, err := startServer(http.StatusServiceUnavailable)
	if err != nil {
		return err
	}
	defer failing.srv.Close()
	healthy, err := startServer(http.StatusOK)
	if err != nil {
		return err
	}
	defer healthy.srv.Close()

	interval := cfg.interval
	if interval == 0 {
		interval = retryfuseredis.DefaultSyncInterval
	}
	lease := cfg.maxLease
	if lease == 0 {
		lease = retryfuseredis.DefaultMaxLease
	}
	fmt.Printf("fleetbench: %d processes × %d callers, %v per run, MaxAttempts %d, Redis %s, SyncInterval %v, MaxLease %d\n",
		cfg.procs, cfg.callers, cfg.duration, cfg.attempts, cfg.redisAddr, interval, lease)
	fmt.Printf("ratio budget: Ratio 0.1, MinPerSecond 1, Window 10s (reserve 10 per window)\n\n")
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)

	// Phase 1: always-503.
	before, err := scriptCalls(rdb)
	if err != nil {
		return err
	}
	cfg503 := cfg
	if cfg.duration503 > 0 {
		cfg503.duration = cfg.duration503
	}
	reps, err := fleet(cfg503, "redis", failing.url, "fleetbench:"+stamp+":503:", 0, nil)
	if err != nil {
		return err
	}
	after, err := scriptCalls(rdb)
	if err != nil {
		return err
	}
	t := sum(reps)
	requests := failing.hits.Load()
	const ratio, reserve, window = 0.1, 10.0, 10 * time.Second
	d := cfg503.duration
	k := math.Ceil(float64(d) / float64(window)) // windows the run spans
	q := float64(t.Calls)
	p := float64(cfg.procs)
	retries := float64(requests - t.Calls)
	ideal := ratio*q + k*reserve // one shared budget, answered synchronously
	// The documented bound, window by window: Ratio·Q' + reserve + what the
	// processes hold or owe from the window before (only the credits, P, in
	// the first window of a fresh key; P·(MaxLease+1) after), Q' counting
	// also the requests deposited late, one interval's worth per window.
	bound := ideal + p + (k-1)*(p*float64(lease+1)+ratio*q*float64(interval)/float64(d))
	amp := func(retries float64) float64 { return 1 + retries/q }
	fmt.Printf("always-503, Redis budgets, %v (%.0f window(s) of 10s):\n", d, k)
	fmt.Printf("  calls Q %d, requests %d, retries %d\n", t.Calls, requests, requests-t.Calls)
	fmt.Printf("  amplification %.4f (requests per call)\n", amp(retries))
	fmt.Printf("  documented bound %.4f (retries ≤ %.0f): measured/bound %.4f\n", amp(bound), bound, amp(retries)/amp(bound))
	fmt.Printf("  one budget answered synchronously, 1 + (Ratio·Q + reserve)/Q: %.4f: retries/(Ratio·Q + reserve) %.4f\n", amp(ideal), retries/ideal)
	fmt.Printf("  an in-memory budget per process instead: %.4f (1 + (Ratio·Q + P·reserve)/Q)\n", amp(ratio*q+k*reserve*p))
	fmt.Printf("  Redis scripts %d: %.1f per second per process; Redis reported unavailable %d times, recovered %d\n\n",
		after-before, float64(after-before)/d.Seconds()/p, t.Unavailable, t.Recovered)

	// Phase 2: healthy, memory and Redis in turn.
	fmt.Println("healthy server, success path (rounds alternate, and so does which budget runs first):")
	rates := map[string][]float64{}
	for round := range cfg.rounds {
		for _, budget := range order(round) {
			before, err := scriptCalls(rdb)
			if err != nil {
				return err
			}
			reps, err := fleet(cfg, budget, healthy.url, fmt.Sprintf("fleetbench:%s:ok%d:", stamp, round), 0, nil)
			if err != nil {
				return err
			}
			after, err := scriptCalls(rdb)
			if err != nil {
				return err
			}
			t := sum(reps)
			rate := float64(t.Calls) / cfg.duration.Seconds()
			rates[budget] = append(rates[budget], rate)
			fmt.Printf("  round %d %-6s %8.0f calls/s, p50 %6.0fµs, p99 %6.0fµs, errors %d, Redis scripts %.1f/s per process\n",
				round+1, budget, rate, t.P50us, t.P99us, t.Errors, float64(after-before)/cfg.duration.Seconds()/float64(cfg.procs))
		}
		fmt.Printf("  round %d: Redis budget costs %.3f× the in-memory one (calls/s memory ÷ redis)\n", round+1, rates["memory"][round]/rates["redis"][round])
	}
	var costs []float64
	for i := range rates["memory"] {
		costs = append(costs, rates["memory"][i]/rates["redis"][i])
	}
	fmt.Printf("  median cost over %d rounds: %.3f×\n", len(costs), median(costs))

	// Phase 3: Redis paused.
	if own == nil {
		fmt.Println("\npaused: skipped (Redis given with -redis; fleetbench pauses only a redis-server of its own)")
		return nil
	}
	fmt.Println("\nRedis paused (SIGSTOP) from 1s in, in the redis rounds; latency measured from 1.5s on (rounds alternate):")
	var added []float64
	for round := range cfg.rounds {
		p99 := map[string]float64{}
		for _, budget := range order(round) {
			var during func()
			if budget == "redis" {
				during = func() {
					time.Sleep(time.Second)
					own.pause()
				}
			}
			reps, err := fleet(cfg, budget, healthy.url, fmt.Sprintf("fleetbench:%s:paused%d:", stamp, round), 1500*time.Millisecond, during)
			own.resume()
			if err != nil {
				return err
			}
			t := sum(reps)
			p99[budget] = t.P99us
			fmt.Printf("  round %d %-6s %8.0f calls/s, p50 %6.0fµs, p99 %6.0fµs, errors %d\n",
				round+1, budget, float64(t.Calls)/cfg.duration.Seconds(), t.P50us, t.P99us, t.Errors)
		}
		added = append(added, p99["redis"]-p99["memory"])
		fmt.Printf("  round %d: p99 added while paused %+.0fµs\n", round+1, added[round])
	}
	fmt.Printf("  median p99 added over %d rounds: %+.0fµs\n", len(added), median(added))
	return nil
}

// order is the order of the budgets in a round: memory first in even
// rounds, Redis first in odd ones.
func order(round int) []string {
	if round%2 == 0 {
		return []string{"memory", "redis"}
	}
	return []string{"redis", "memory"}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
