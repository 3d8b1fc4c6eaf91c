package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
)

// The load test sends many concurrent calls through one Transport, with a
// shared budget.Ratio and a breaker.Breaker, against the fault server, on real
// loopback sockets and the real clock. The default run makes loadSmallCalls
// calls; RETRYFUSE_LOAD=1 (without -short) makes loadFullCalls.

const (
	loadSmallCalls = 200
	loadFullCalls  = 1000

	// loadCallDeadline is each call's deadline; a call must return within it
	// plus loadCallMargin.
	loadCallDeadline = 2 * time.Second
	loadCallMargin   = 500 * time.Millisecond
)

func TestLoadMixedFaults(t *testing.T) {
	n := loadSmallCalls
	if os.Getenv("RETRYFUSE_LOAD") == "1" && !testing.Short() {
		n = loadFullCalls
	}
	runLoad(t, n)
}

// loadResult is what one call of the load test returned.
type loadResult struct {
	call    faultCall
	dur     time.Duration // from before Do to the body closed
	status  int           // 0 without a response
	err     error         // Do's error
	bodyErr error         // the error reading the body, if any
}

// loadMix returns n calls, the same for the same n: GET, PUT and keyed POST in
// turn (each POST with a key of its own), 40% healthy and the rest spread
// over every fault, meeting between one and all three attempts.
func loadMix(n int) []faultCall {
	rng := rand.New(rand.NewPCG(20260101, uint64(n)))
	calls := make([]faultCall, n)
	for i := range calls {
		lc := faultCall{name: fmt.Sprintf("c%d", i)}
		switch i % 3 {
		case 0:
			lc.method = http.MethodGet
		case 1:
			lc.method = http.MethodPut
		default:
			lc.method = http.MethodPost
			lc.key = fmt.Sprintf("ld-key-%d", i)
		}
		if rng.IntN(10) >= 4 {
			lc.fault = allFaults[1+rng.IntN(len(allFaults)-1)]
			lc.times = 1 + rng.IntN(3)
		}
		switch lc.fault {
		case faultSlowHeaders:
			lc.delay = []string{"20ms", "400ms"}[rng.IntN(2)] // under and over AttemptTimeout
		case faultRetryAfter503:
			lc.retryAfter = []string{"0", "0", "1"}[rng.IntN(3)]
		}
		calls[i] = lc
	}
	return calls
}

// doLoadCall makes one call with its own deadline and reads at most 64 KiB of the
// body before closing it.
func doLoadCall(ctx context.Context, client *http.Client, base string, lc faultCall) (res loadResult) {
	res.call = lc
	ctx, cancel := context.WithTimeout(ctx, loadCallDeadline)
	defer cancel()
	began := time.Now()
	defer func() { res.dur = time.Since(began) }()
	req, err := lc.request(ctx, base)
	if err != nil {
		res.err = err
		return res
	}
	resp, err := client.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	res.status = resp.StatusCode
	_, res.bodyErr = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return res
}

func runLoad(t *testing.T, n int) {
	hardBound := 20*time.Second + time.Duration(n)*10*time.Millisecond
	baseline := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), hardBound)
	defer cancel()

	srv := newFaultServer(t, 3*time.Second)
	budget, err := budget.NewRatio(budget.RatioConfig{Ratio: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	brk, err := breaker.New(breaker.Settings{FailureThreshold: 10, MinObservations: 20, OpenTimeout: 50 * time.Millisecond, MaxProbes: 5})
	if err != nil {
		t.Fatal(err)
	}
	var (
		retries   atomic.Int64
		resends   atomic.Int64 // requests the base re-sent by itself: each is charged to the budget
		mu        sync.Mutex
		giveUps   = map[string]int{}
		budgetOut int
		throttled int // calls the throttle refused: never sent, so never counted by the budget
		opened    atomic.Int64
	)
	tr := &Transport{
		Retry: RetryPolicy{
			MaxAttempts:    3,
			InitialBackoff: 5 * time.Millisecond,
			MaxBackoff:     50 * time.Millisecond,
			AttemptTimeout: 200 * time.Millisecond,
			MaxRetryAfter:  time.Second,
			Budget:         budget,
		},
		Brake: BrakePolicy{
			Breaker: brk,
		},
		Hooks: Hooks{
			Retry:        func(RetryInfo) { retries.Add(1) },
			HiddenResend: func(h AttemptDoneInfo) { resends.Add(int64(h.Connections - 1)) },
			GiveUp: func(g GiveUpInfo) {
				mu.Lock()
				defer mu.Unlock()
				giveUps[sentinelName(g.Reason)]++
				if errors.Is(g.Reason, ErrBudgetExhausted) {
					budgetOut++
				}
				if ReasonName(g.Reason) == "throttled" {
					throttled++
				}
			},
			BreakerChange: func(c breaker.Change) {
				if c.To == breaker.Open {
					opened.Add(1)
				}
			},
		},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	before := budget.Snapshot()

	calls := loadMix(n)
	results := make([]loadResult, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, lc := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = doLoadCall(ctx, client, srv.URL, lc)
		}()
	}
	began := time.Now()
	close(start)
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	select { // the watchdog
	case <-finished:
	case <-ctx.Done():
		t.Fatalf("%d calls not done within %v: deadlock? goroutines:\n%s", n, hardBound, goroutineDump())
	}
	elapsed := time.Since(began)
	after := budget.Snapshot()

	// Every call returned within its deadline and the margin.
	durs := make([]time.Duration, n)
	late := 0
	for i, r := range results {
		durs[i] = r.dur
		if r.dur > loadCallDeadline+loadCallMargin {
			late++
			if late <= 10 {
				t.Errorf("call %s (%s, fault %q ×%d): took %v, want at most %v", r.call.name, r.call.method, r.call.fault, r.call.times, r.dur, loadCallDeadline+loadCallMargin)
			}
		}
	}
	slices.Sort(durs)

	// No keyed POST took effect twice; one that took effect was never
	// reported as a definite failure.
	effects := srv.effectsPerKey()
	for _, r := range results {
		if r.call.key == "" {
			continue
		}
		got := effects[r.call.key]
		if got > 1 {
			t.Errorf("key %s (fault %q ×%d): applied %d times, want at most 1", r.call.key, r.call.fault, r.call.times, got)
		}
		var rec *ReconcileRequiredError
		if got == 1 && r.err != nil && !errors.As(r.err, &rec) {
			t.Errorf("key %s (fault %q ×%d) took effect, but the call returned %v; want a response or a *ReconcileRequiredError", r.call.key, r.call.fault, r.call.times, r.err)
		}
	}

	// The budget's accounts add up: every call the throttle let through
	// is recorded.
	mu.Lock()
	sent := n - throttled
	mu.Unlock()
	if got := after.Requests - before.Requests; got != uint64(sent) {
		t.Errorf("budget requests recorded: got %d, want %d (the calls made, %d, less the %d throttled)", got, sent, n, throttled)
	}
	// Every retry the Transport asked for is granted (a Retry hook) or
	// refused (a GiveUp with ErrBudgetExhausted); every request the base
	// re-sent by itself is charged too, granted or refused.
	mu.Lock()
	refusedSeen := budgetOut
	mu.Unlock()
	granted, refused := after.Retries-before.Retries, after.Refused-before.Refused
	if granted < uint64(retries.Load()) || refused < uint64(refusedSeen) {
		t.Errorf("budget: granted %d, refused %d; want at least %d granted (Retry hooks) and %d refused (GiveUp with ErrBudgetExhausted)", granted, refused, retries.Load(), refusedSeen)
	}
	if got, want := granted+refused, uint64(retries.Load())+uint64(refusedSeen)+uint64(resends.Load()); got != want {
		t.Errorf("budget retries asked: got %d, want %d (%d Retry hooks, %d budget give-ups, %d hidden re-sends)", got, want, retries.Load(), refusedSeen, resends.Load())
	}

	// Connections and goroutines go once the calls are done.
	tr.CloseIdleConnections()
	if !poll(settleBound, func() bool { return srv.openConns() == 0 }) {
		t.Errorf("open connections on the server after CloseIdleConnections: got %d, want 0", srv.openConns())
	}
	srv.Close()
	if !poll(settleBound, func() bool { return runtime.NumGoroutine() <= baseline }) {
		t.Errorf("goroutines: got %d, want at most %d (before the test); goroutines:\n%s", runtime.NumGoroutine(), baseline, goroutineDump())
	}

	t.Logf("%d calls in %v; call duration p50 %v, p99 %v, max %v", n, elapsed.Round(time.Millisecond),
		percentile(durs, 50), percentile(durs, 99), durs[n-1])
	t.Logf("connections accepted %d; budget %+v; retries %d; breaker opened %d times", srv.accepted.Load(), after, retries.Load(), opened.Load())
	t.Logf("faults injected %v", srv.injectedCounts())
	mu.Lock()
	t.Logf("give-ups %v", giveUps)
	mu.Unlock()
	t.Logf("outcomes %s", tallyOutcomes(results))
}

// sentinelName names a GiveUp reason for the tally: the sentinel it
// matches.
func sentinelName(err error) string {
	for _, s := range []error{ErrAttemptsExhausted, ErrBudgetExhausted, ErrCircuitOpen, ErrNotRepeatable,
		ErrFailureStreak, ErrCallCost, errRetryAfterTooLong, ErrDeadline, errFinal,
		context.DeadlineExceeded, context.Canceled} {
		if errors.Is(err, s) {
			return strings.TrimPrefix(s.Error(), "retryfuse: ")
		}
	}
	return fmt.Sprintf("%T", err)
}

// tallyOutcomes tallies results by method and how they ended.
func tallyOutcomes(results []loadResult) string {
	m := map[string]int{}
	for _, r := range results {
		var k string
		var rec *ReconcileRequiredError
		var open *breaker.OpenError
		var re *RetryError
		switch {
		case r.err == nil && r.bodyErr != nil:
			k = fmt.Sprintf("%d+body-error", r.status)
		case r.err == nil:
			k = fmt.Sprint(r.status)
		case errors.As(r.err, &rec):
			k = "reconcile"
		case errors.As(r.err, &open):
			k = "circuit-open"
		case errors.As(r.err, &re):
			k = "retry-error:" + sentinelName(re.Reason)
		case errors.Is(r.err, context.DeadlineExceeded):
			k = "deadline"
		default:
			k = fmt.Sprintf("other-error %T", r.err)
			var ue *url.Error
			if errors.As(r.err, &ue) {
				k = fmt.Sprintf("other-error %T", ue.Err)
			}
		}
		m[r.call.method+" "+k]++
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n\t%-50s %d", k, m[k])
	}
	return b.String()
}

// goroutineDump dumps every goroutine's stack.
func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// percentile returns the p-th percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(len(sorted)-1, i-1))]
}
