package retryfuse

import (
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/internal/throttle"
)

// What the defaults refuse: nothing, the throttle being off unless asked
// for; and what the throttle, when on, refuses: nothing that a plain
// client with a retry loop would have completed. Each test draws the
// throttle's coin as refusing whenever its share is above zero (randN 0),
// so that a share above zero at any moment shows.

// statusBase answers each request with the status code returns for its
// number (from 0), counting them.
type statusBase struct {
	sent atomic.Int64
	code func(n int64) int
}

func (b *statusBase) RoundTrip(req *http.Request) (*http.Response, error) {
	n := b.sent.Add(1) - 1
	code := b.code(n)
	h := http.Header{}
	return &http.Response{StatusCode: code, Status: strconv.Itoa(code), Header: h,
		Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// countOutcomes sends calls GETs through tr, advancing clk by gap between
// them, and returns how many ended 200 and how many were throttled.
func countOutcomes(t *testing.T, tr *Transport, clk *fakeClock, calls int, gap time.Duration) (ok, throttled int) {
	t.Helper()
	for i := range calls {
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		switch {
		case errors.Is(err, throttle.ErrThrottled):
			throttled++
		case err == nil && resp.StatusCode == http.StatusOK:
			ok++
		case err != nil:
			t.Logf("call %d: %v", i, err)
		}
		clk.Advance(gap)
	}
	return ok, throttled
}

// throttleOn is the throttle of new calls with its defaults.
var throttleOn = LoadPolicy{Throttle: ThrottlePolicy{On: true}}

// The zero Transport refuses nothing before sending: 30 sequential calls,
// each answered 503 and then 200, end 200 while the default retry budget
// lets them retry and with the 503 once it stops retrying, never with an
// error, whatever the draws of the jitter (20 runs).
func TestZeroTransportRefusesNoneOfCallsServedOnTheirRetry(t *testing.T) {
	for run := range 20 {
		clk := newFakeClockAt(fixedStart)
		var seen sync.Map // the calls whose first attempt was answered 503
		tr := newTransport(t, clk, &Transport{Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
			code := http.StatusOK
			if _, again := seen.LoadOrStore(req.Header.Get("X-Call"), true); !again {
				code = http.StatusServiceUnavailable
			}
			return &http.Response{StatusCode: code, Status: strconv.Itoa(code), Header: http.Header{},
				Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
		})})
		setRandN(tr, rand.New(rand.NewPCG(uint64(run), 7)).Int64N)
		var served, gotBack int
		for i := range 30 {
			req := newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")
			req.Header.Set("X-Call", strconv.Itoa(i))
			resp, _, err := do(tr, req)
			switch {
			case err != nil:
				t.Fatalf("run %d, call %d: got %v, want the 200 or the 503, as a plain client gets it", run, i, err)
			case resp.StatusCode == http.StatusOK:
				served++
			default:
				gotBack++
			}
			clk.Advance(10 * time.Millisecond)
		}
		if served+gotBack != 30 || served == 0 {
			t.Fatalf("run %d: %d served on their retry, %d given their 503; want 30 answered, some served", run, served, gotBack)
		}
	}
}

func TestThrottleServesADependencyThatServesEveryCallOnItsRetry(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	base := &statusBase{code: func(n int64) int {
		if n%2 == 0 {
			return http.StatusServiceUnavailable // every call's first attempt
		}
		return http.StatusOK
	}}
	// The budget lets every call retry here: what is measured is the
	// throttle's share alone (the default budget grants retries to 10%
	// of requests and 1 a second, and hands back the 503 of a call it
	// stops).
	tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{NewBudget: func(string) (budget.Budget, error) { return budget.Unlimited(), nil }}, Load: throttleOn})
	setRandN(tr, func(int64) int64 { return 0 })
	ok, throttled := countOutcomes(t, tr, clk, 30, 10*time.Millisecond)
	if ok != 30 || throttled != 0 {
		t.Errorf("30 calls that each succeed on their retry: %d ended 200, %d throttled; want 30 and 0", ok, throttled)
	}
}

func TestThrottleRefusesNothingOfADependencyRejectingOneRequestInFive(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	rnd := rand.New(rand.NewPCG(1, 2))
	base := &statusBase{code: func(int64) int {
		if rnd.IntN(5) == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}}
	tr := newTransport(t, clk, &Transport{Base: base, Load: throttleOn})
	setRandN(tr, func(int64) int64 { return 0 })
	_, throttled := countOutcomes(t, tr, clk, 400, 5*time.Millisecond)
	if throttled != 0 {
		t.Errorf("400 calls, 20%% of requests rejected: %d throttled, want 0", throttled)
	}
}

// A Breaker that asks for ten outcomes before it may open gets them: the
// throttle does not refuse the calls that would bring them.
func TestThrottleLeavesTheBreakerItsMinObservations(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	base := &statusBase{code: func(int64) int { return http.StatusServiceUnavailable }}
	br, err := breaker.New(breaker.Settings{FailureThreshold: 1, MinObservations: 10, OpenTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var opened []int64
	tr := newTransport(t, clk, &Transport{
		Base: base,
		Retry: RetryPolicy{
			MaxAttempts: 1,
		},
		Brake: BrakePolicy{
			Breaker: br,
		},
		Load: throttleOn,
		Hooks: Hooks{BreakerChange: func(i breaker.Change) {
			if i.To == breaker.Open {
				opened = append(opened, base.sent.Load())
			}
		}},
	})
	setRandN(tr, func(int64) int64 { return 0 })
	var throttled, open int
	for range 30 {
		_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		var co *breaker.OpenError
		switch {
		case errors.Is(err, throttle.ErrThrottled):
			throttled++
		case errors.As(err, &co):
			open++
		}
		clk.Advance(10 * time.Millisecond)
	}
	if len(opened) != 1 || opened[0] != 10 {
		t.Errorf("the breaker opened after requests %v, want once, after the 10th", opened)
	}
	if got := base.sent.Load(); got != 10 || throttled != 0 || open != 20 {
		t.Errorf("sent %d, throttled %d, refused open %d; want 10, 0 and 20", got, throttled, open)
	}
}

// After an outage, work flows again at once: the first call that reaches
// the dependency once it is back succeeds, and the throttle forgets its
// rejections within a few accepted attempts.
func TestThrottleLetsWorkFlowSoonAfterAnOutage(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	recovery := fixedStart.Add(3 * time.Second)
	base := &statusBase{code: func(int64) int {
		if clk.Now().Before(recovery) {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}}
	tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1}, Load: throttleOn})
	setRandN(tr, rand.New(rand.NewPCG(3, 4)).Int64N)
	var first time.Time
	served, after := 0, 0
	for clk.Now().Before(recovery.Add(time.Second)) {
		at := clk.Now()
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if err == nil && resp.StatusCode == http.StatusOK && first.IsZero() {
			first = at
		}
		if at.Sub(recovery) >= 500*time.Millisecond {
			after++
			if err == nil && resp.StatusCode == http.StatusOK {
				served++
			}
		}
		clk.Advance(5 * time.Millisecond)
	}
	if d := first.Sub(recovery); first.IsZero() || d > 200*time.Millisecond {
		t.Errorf("first 200 %v after recovery, want within 200ms", d)
	}
	if share := float64(served) / float64(after); share < 0.95 {
		t.Errorf("from 0.5s after recovery: %d of %d calls served (%.2f), want at least 0.95", served, after, share)
	}
}
