package retryfuse

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/internal/throttle"
)

// The controls of load as a call meets them (overload.go): the throttle
// before the first attempt, the learnt limit around each attempt, slow
// start after a breaker closes, and what they report.

// loadBase answers with its status (200 unless set), counting what it is
// sent; while hold is set, each request waits on it after arriving.
type loadBase struct {
	status  atomic.Int32
	sent    atomic.Int32
	arrived chan struct{}
	hold    chan struct{}
}

func newLoadBase() *loadBase {
	return &loadBase{arrived: make(chan struct{}, 64)}
}

func (b *loadBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.sent.Add(1)
	if b.hold != nil {
		b.arrived <- struct{}{}
		select {
		case <-b.hold:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	code := int(b.status.Load())
	if code == 0 {
		code = http.StatusOK
	}
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// events collects the Policy events.
type events struct {
	mu  sync.Mutex
	all []PolicyInfo
}

func (e *events) hook(i PolicyInfo) {
	e.mu.Lock()
	e.all = append(e.all, i)
	e.mu.Unlock()
}

func (e *events) of(policy, action string) []PolicyInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []PolicyInfo
	for _, i := range e.all {
		if i.Policy == policy && i.Action == action {
			out = append(out, i)
		}
	}
	return out
}

// matching counts the reasons that match reason.
func (g *giveUpLog) matching(reason error) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, r := range g.reasons {
		if errors.Is(r, reason) {
			n++
		}
	}
	return n
}

func TestThrottleRefusesNewCallsToADependencyThatRejectsThem(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	base := newLoadBase()
	base.status.Store(http.StatusServiceUnavailable)
	brk, err := breaker.New(breaker.Settings{FailureThreshold: 8})
	if err != nil {
		t.Fatal(err)
	}
	var ev events
	var gave giveUpLog
	tr := newTransport(t, clk, &Transport{
		Base: base,
		Retry: RetryPolicy{
			MaxAttempts: 1,
		},
		Brake: BrakePolicy{
			Breaker: brk,
		},
		Load:  LoadPolicy{Throttle: ThrottlePolicy{On: true}},
		Hooks: Hooks{Policy: ev.hook, GiveUp: gave.hook},
	})
	setRandN(tr, func(int64) int64 { return 0 }) // refuse whenever it may
	// One call in four accepted: the throttle would refuse after the
	// fifth rejection, but waits until the breaker has heard its eight
	// outcomes, which never make a streak of eight failures.
	const heard = 8
	for i := range heard {
		code := http.StatusServiceUnavailable
		if i%4 == 0 {
			code = http.StatusOK
		}
		base.status.Store(int32(code))
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if err != nil || resp.StatusCode != code {
			t.Fatalf("call %d: got %v, %v; want the %d back: the breaker has not heard %d outcomes", i, resp, err, code, heard)
		}
		clk.Advance(time.Millisecond)
	}
	base.status.Store(http.StatusServiceUnavailable)
	for i := range 10 {
		_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if !errors.Is(err, throttle.ErrThrottled) || !errors.Is(err, ErrDeclined) {
			t.Fatalf("call %d after %d outcomes, 2 accepted: got %v, want an error matching throttle.ErrThrottled and ErrDeclined", i, heard, err)
		}
		if !strings.Contains(err.Error(), "http://dep.test:80") || !strings.Contains(err.Error(), "% of new calls are refused") {
			t.Errorf("error: %q, want it to name the scope and the share refused", err)
		}
	}
	if got := base.sent.Load(); got != heard {
		t.Errorf("requests sent: got %d, want %d: a throttled call sends nothing", got, heard)
	}
	if got := brk.StateAt("http://dep.test:80", clk.Now()); got != breaker.Closed {
		t.Errorf("breaker: %v, want closed: a refusal is not a failure of the dependency", got)
	}
	rejected := ev.of(policyThrottle, actionRejected)
	if len(rejected) != 10 {
		t.Fatalf("throttle events: got %d, want 10", len(rejected))
	}
	if i := rejected[0]; i.Scope != "http://dep.test:80" || i.CallID == 0 || !errors.Is(i.Err, throttle.ErrThrottled) {
		t.Errorf("event: scope %q, call %d, err %v; want the scope, the call's ID and the refusal", i.Scope, i.CallID, i.Err)
	}
	if n := gave.matching(throttle.ErrThrottled); n != 10 {
		t.Errorf("GiveUp with throttle.ErrThrottled: got %d, want 10", n)
	}
	if got := ReasonName(rejected[0].Err); got != "throttled" {
		t.Errorf("ReasonName: got %q, want throttled", got)
	}
}

func TestThrottleIsOffByDefault(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	base := newLoadBase()
	base.status.Store(http.StatusServiceUnavailable)
	tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1}})
	setRandN(tr, func(int64) int64 { return 0 }) // refuse whenever it may
	for i := range 200 {
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("call %d to an always-503 dependency: got %v, %v; want the 503 back, as a plain client gets it", i, resp, err)
		}
		clk.Advance(time.Millisecond)
	}
	if got := base.sent.Load(); got != 200 {
		t.Errorf("requests sent: got %d, want 200", got)
	}
	if st := tr.scopes.last.Load(); st != nil && st.throttle != nil {
		t.Error("the zero Transport keeps a throttle for the scope")
	}
}

func TestThrottleOnNeverRefusesAHealthyDependency(t *testing.T) {
	clk := newFakeClockAt(fixedStart)
	base := newLoadBase()
	tr := newTransport(t, clk, &Transport{Base: base, Load: LoadPolicy{Throttle: ThrottlePolicy{On: true}}})
	setRandN(tr, func(int64) int64 { return 0 })
	for i := range 2000 {
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: got %v, %v; want 200", i, resp, err)
		}
		clk.Advance(time.Millisecond)
	}
	if st := tr.scopes.last.Load(); st == nil || st.throttle == nil {
		t.Fatal("Throttle.On keeps no throttle for the scope")
	}
}

// heldCalls starts n calls through tr to a base that holds them, and
// waits until all have arrived; release lets them answer.
func heldCalls(t *testing.T, tr *Transport, base *loadBase, n int) (release func() []error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
			if err == nil && resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
			errs[i] = err
		})
	}
	for range n {
		select {
		case <-base.arrived:
		case <-time.After(callWait):
			t.Fatal("a held call did not arrive")
		}
	}
	return func() []error {
		close(base.hold)
		wg.Wait()
		base.hold = make(chan struct{})
		return errs
	}
}

// learntStart is where a learnt limit starts, as the README says: 4
// (internal/bulkhead's initialLimit).
const learntStart = 4

func TestLearntLimitRefusesWithABulkheadFullError(t *testing.T) {
	noGoroutineLeft(t)
	base := newLoadBase()
	base.hold = make(chan struct{})
	tr := newTransport(t, newFakeClockAt(fixedStart), &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1}, Load: LoadPolicy{Adaptive: true, MaxWait: -1}})
	release := heldCalls(t, tr, base, learntStart)
	_, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
	var full *BulkheadFullError
	if !errors.As(err, &full) || !full.Learnt || full.MaxInFlight != learntStart || !errors.Is(err, ErrDeclined) {
		t.Fatalf("the call over the learnt limit: got %v, want a *BulkheadFullError of the learnt limit, %d, matching ErrDeclined", err, learntStart)
	}
	if !strings.Contains(err.Error(), "learnt limit") {
		t.Errorf("error: %q, want it to say the limit was learnt", err)
	}
	for _, err := range release() {
		if err != nil {
			t.Errorf("a held call: %v", err)
		}
	}
}

func TestLearntLimitChangesAreReported(t *testing.T) {
	noGoroutineLeft(t)
	clk := newFakeClockAt(fixedStart)
	base := newLoadBase()
	base.hold = make(chan struct{})
	var ev events
	tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1}, Load: LoadPolicy{Adaptive: true}, Hooks: Hooks{Policy: ev.hook}})
	// Rounds of the limit in flight, each answering 10ms later: nothing
	// queues, and the limit doubles once a window has its answers.
	for range 4 {
		release := heldCalls(t, tr, base, learntStart)
		clk.Advance(10 * time.Millisecond)
		release()
	}
	changed := ev.of(policyAdaptiveLimit, actionChanged)
	if len(changed) != 1 {
		t.Fatalf("limit changes: got %+v, want one", changed)
	}
	if i := changed[0]; i.PrevLimit != 4 || i.Limit != 8 || i.Why != "growth" || i.Scope != "http://dep.test:80" || i.CallID == 0 {
		t.Errorf("change: %d -> %d (%s) in %q, call %d; want 4 -> 8 (growth) in http://dep.test:80, with the call's ID",
			i.PrevLimit, i.Limit, i.Why, i.Scope, i.CallID)
	}
	if _, got := tr.scopes.last.Load().bulkhead.Limits(clk.Now()); got != 8 {
		t.Errorf("the bulkhead's limit: got %d, want 8", got)
	}
}

func TestSlowStartAfterTheBreakerCloses(t *testing.T) {
	noGoroutineLeft(t)
	clk := newFakeClockAt(fixedStart)
	base := newLoadBase()
	base.status.Store(http.StatusServiceUnavailable)
	brk, err := breaker.New(breaker.Settings{FailureThreshold: 1, OpenTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var ev events
	// No waiting: what slow start does not admit at once, it refuses.
	tr := newTransport(t, clk, &Transport{Base: base, Retry: RetryPolicy{MaxAttempts: 1}, Brake: BrakePolicy{Breaker: brk}, Load: LoadPolicy{SlowStart: time.Second, MaxWait: -1}, Hooks: Hooks{Policy: ev.hook}})
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")); err != nil {
		t.Fatal(err) // the 503, which opens the scope
	}
	clk.Advance(time.Second)
	base.status.Store(http.StatusOK)
	if _, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", "")); err != nil {
		t.Fatal(err) // the probe, which closes it
	}
	started := ev.of(policySlowStart, actionStarted)
	if len(started) != 1 || started[0].Why != whyBreakerClosed || started[0].Limit != 1 || started[0].Wait != time.Second || started[0].CallID == 0 {
		t.Fatalf("slow start events: got %+v, want one, from 1 attempt over 1s, after the breaker closed", started)
	}
	// One attempt at a time, until one succeeds and a tenth of the window
	// has passed.
	base.hold = make(chan struct{})
	release := heldCalls(t, tr, base, 1)
	_, _, err = do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
	var full *BulkheadFullError
	if !errors.As(err, &full) || !full.SlowStart || full.MaxInFlight != 1 {
		t.Fatalf("a second attempt at once after the close: got %v, want a *BulkheadFullError of slow start, 1 in flight", err)
	}
	clk.Advance(100 * time.Millisecond)
	release() // a success: one more may go
	release = heldCalls(t, tr, base, 2)
	release()
	clk.Advance(time.Second)
	release = heldCalls(t, tr, base, 20) // the ramp is over: no limit
	release()
}

func TestHedgesAndRetriesPassTheLearntLimit(t *testing.T) {
	noGoroutineLeft(t)
	t.Run("a retry", func(t *testing.T) {
		clk := newFakeClockAt(fixedStart)
		base := newLoadBase()
		var gave giveUpLog
		tr := newTransport(t, clk, &Transport{
			Base: base,
			Retry: RetryPolicy{
				MaxAttempts: 2,
				Budget:      budget.Unlimited(),
			},
			Load: LoadPolicy{
				Adaptive:    true,
				MinInFlight: 1,
				MaxInFlight: 1,
				MaxWait:     -1,
			},
			Hooks: Hooks{GiveUp: gave.hook},
		})
		base.status.Store(http.StatusServiceUnavailable)
		// While the call waits to retry, another takes the only slot.
		var release func() []error
		clk.onSleep = func(time.Duration) {
			base.status.Store(http.StatusOK)
			base.hold = make(chan struct{})
			release = heldCalls(t, tr, base, 1)
		}
		resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, "http://dep.test/", ""))
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("got %v, %v; want the 503 back: the retry found the limit full", resp, err)
		}
		if n := gave.matching(errLearntLimit); n != 1 {
			t.Errorf("GiveUp with learnt_limit: got %d, want 1", n)
		}
		release()
	})
	t.Run("a hedge", func(t *testing.T) {
		base := newLoadBase()
		base.hold = make(chan struct{})
		var ev events
		// A ceiling of 2 (MaxHedges with a ceiling of 1 is refused): a PUT,
		// never hedged, holds one slot of the learnt limit, the GET's
		// attempt the other, and the GET's hedge finds none.
		tr := newTransport(t, nil, &Transport{
			Base: base,
			Load: LoadPolicy{
				Adaptive:    true,
				MinInFlight: 1,
				MaxInFlight: 2,
			},
			Hedge: HedgePolicy{
				Max:   1,
				Delay: time.Millisecond,
			},
			Hooks: Hooks{Policy: ev.hook},
		})
		var calls []*asyncCall
		for _, method := range []string{http.MethodPut, http.MethodGet} {
			calls = append(calls, goDo(tr, newRequest(t, testCtx(t), method, "http://dep.test/", "")))
			select {
			case <-base.arrived:
			case <-time.After(callWait):
				t.Fatalf("the %s did not arrive", method)
			}
		}
		if !poll(callWait, func() bool { return len(ev.of(policyHedge, actionRefused)) > 0 }) {
			t.Fatal("no hedge refused")
		}
		refused := ev.of(policyHedge, actionRefused)[0]
		var full *BulkheadFullError
		if !errors.As(refused.Err, &full) || !full.Learnt {
			t.Errorf("the hedge's refusal: %v, want the learnt limit's *BulkheadFullError", refused.Err)
		}
		close(base.hold)
		for _, c := range calls {
			if c.wait(t); c.err != nil || c.resp.StatusCode != http.StatusOK {
				t.Errorf("got %v, %v; want a 200", c.resp, c.err)
			}
		}
		if n := base.sent.Load(); n != 2 {
			t.Errorf("requests sent: got %d, want 2 (no hedge)", n)
		}
	})
}
