package retryfuseredis

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
)

// These tests stop, pause and break Redis under budgets that sync in the
// background, and check that no call waits on it, that the fail-safe is
// the only answer meanwhile, that each change is reported once, and that
// the shared budget resumes by itself.

// callBound is the most a budget call may take here: far below the
// Timeout of these budgets (3s), so that a call that waited on Redis
// would show.
const callBound = 500 * time.Millisecond

// observed is what a run of calls saw.
type observed struct {
	slowest  time.Duration
	down     int // errors wrapping ErrUnavailable
	up       int // errors wrapping ErrRecovered
	other    []error
	grantsAt []int // indexes of granted calls after the first ErrUnavailable
	n        int
	afterErr bool
}

// call records one RecordRequest and one AllowRetry.
func (o *observed) call(b budget.Budget) (bool, error) {
	start := time.Now()
	b.RecordRequest(bg())
	ok, err := b.AllowRetry(bg())
	o.slowest = max(o.slowest, time.Since(start))
	o.n++
	switch {
	case err == nil:
	case errors.Is(err, ErrUnavailable):
		o.down++
		o.afterErr = true
	case errors.Is(err, ErrRecovered):
		o.up++
	default:
		o.other = append(o.other, err)
	}
	if ok && o.afterErr && o.up == 0 {
		o.grantsAt = append(o.grantsAt, o.n)
	}
	return ok, err
}

// callUntil calls until stop says so, or fails after 15s.
func (o *observed) callUntil(t *testing.T, b budget.Budget, stop func(ok bool, err error) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if stop(o.call(b)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15s of calls: %+v", *o)
		}
		time.Sleep(time.Millisecond)
	}
}

func faultBudget(t *testing.T, addr string, mode FailSafe) *RatioBudget {
	t.Helper()
	b, err := NewRatioBudget(newClient(t, addr), "faults", budget.RatioConfig{Ratio: 1, MinPerSecond: -1, Window: 10 * time.Second},
		BudgetOptions{Prefix: uniq(t), Timeout: 3 * time.Second, SyncInterval: 10 * time.Millisecond, FailSafe: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(bg()) })
	return b
}

// TestBudgetRedisPausedAndResumed: with Redis paused (SIGSTOP), every call
// answers at once; the first after the sync times out reports it; with
// FailSafeRefuse no retry is granted until Redis answers again, and the
// first call after that reports the recovery.
func TestBudgetRedisPausedAndResumed(t *testing.T) {
	s := startServer(t)
	b := faultBudget(t, s.Addr(), FailSafeRefuse)
	var o observed
	o.callUntil(t, b, func(ok bool, err error) bool { return ok && err == nil && b.s.heldNow() > 0 }) // a lease came
	s.Pause()
	o.callUntil(t, b, func(_ bool, err error) bool { return errors.Is(err, ErrUnavailable) })
	for range 50 {
		o.call(b)
	}
	s.Resume()
	o.callUntil(t, b, func(_ bool, err error) bool { return errors.Is(err, ErrRecovered) })
	o.callUntil(t, b, func(ok bool, err error) bool { return ok && err == nil })
	if o.slowest > callBound {
		t.Errorf("slowest call: %v, want under %v: a call waited on Redis", o.slowest, callBound)
	}
	if o.down != 1 || o.up != 1 || len(o.other) != 0 {
		t.Errorf("reports: %d unavailable, %d recovered, others %v; want one of each and no other", o.down, o.up, o.other)
	}
	if len(o.grantsAt) != 0 {
		t.Errorf("FailSafeRefuse, Redis paused: retries granted at calls %v, want none", o.grantsAt)
	}
}

// TestBudgetRedisKilledAndRestarted: the same with Redis killed and
// started again (empty), under FailSafeLocal: the local budget answers
// meanwhile, and the shared one is back by itself.
func TestBudgetRedisKilledAndRestarted(t *testing.T) {
	s := startServer(t)
	b := faultBudget(t, s.Addr(), FailSafeLocal)
	var o observed
	o.callUntil(t, b, func(ok bool, err error) bool { return ok && err == nil && b.s.heldNow() > 0 })
	s.Stop()
	o.callUntil(t, b, func(_ bool, err error) bool { return errors.Is(err, ErrUnavailable) })
	for range 20 {
		if ok, _ := o.call(b); !ok {
			t.Fatal("FailSafeLocal at ratio 1, a request per retry: got refused, want the local budget's grant")
		}
	}
	s.Start()
	o.callUntil(t, b, func(_ bool, err error) bool { return errors.Is(err, ErrRecovered) })
	if o.slowest > callBound {
		t.Errorf("slowest call: %v, want under %v: a call waited on Redis", o.slowest, callBound)
	}
	if o.down != 1 || o.up != 1 || len(o.other) != 0 {
		t.Errorf("reports: %d unavailable, %d recovered, others %v; want one of each and no other", o.down, o.up, o.other)
	}
	waitExists(t, newClient(t, s.Addr()), b.Key())
}

// TestBudgetRedisAnswersErrors: a script that fails (the key holds
// something else) is a failure like any other, and so is its end.
func TestBudgetRedisAnswersErrors(t *testing.T) {
	c := sharedClient(t)
	b, err := newRatioBudget(c, "errors", budget.RatioConfig{Ratio: 1, MinPerSecond: -1}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout, FailSafe: FailSafeRefuse})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(bg(), b.Key(), "not a budget", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	b.RecordRequest(bg())
	if err := b.s.sync(bg(), false); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("sync on a key of another kind: got %v, want an error wrapping ErrUnavailable", err)
	}
	steps := []struct {
		ok   bool
		want error
	}{{false, ErrUnavailable}, {false, nil}}
	for i, st := range steps {
		b.RecordRequest(bg())
		ok, err := b.AllowRetry(bg())
		if ok != st.ok || !errors.Is(err, st.want) || (st.want == nil && err != nil) {
			t.Fatalf("call %d with Redis failing: got (%v, %v), want (%v, %v)", i, ok, err, st.ok, st.want)
		}
	}
	c.Del(bg(), b.Key())
	if err := b.s.sync(bg(), false); err != nil {
		t.Fatalf("sync with the key gone: %v", err)
	}
	ok, err := b.AllowRetry(bg())
	if !errors.Is(err, ErrRecovered) || !ok {
		t.Fatalf("first call after recovery: got (%v, %v), want (true, ErrRecovered): a lease was taken for the retries asked", ok, err)
	}
	if ok, err := b.AllowRetry(bg()); err != nil {
		t.Fatalf("second call after recovery: got (%v, %v), want a nil error", ok, err)
	}
}

// TestBudgetUnreportedOutageIsNotReported: an outage no call saw is not
// reported when it ends either.
func TestBudgetUnreportedOutageIsNotReported(t *testing.T) {
	c := sharedClient(t)
	b, err := newRatioBudget(c, "quiet", budget.RatioConfig{}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	c.Set(bg(), b.Key(), "not a budget", time.Minute)
	b.RecordRequest(bg())
	if err := b.s.sync(bg(), false); err == nil {
		t.Fatal("sync on a key of another kind: got nil, want an error")
	}
	c.Del(bg(), b.Key())
	b.RecordRequest(bg())
	if err := b.s.sync(bg(), false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AllowRetry(bg()); err != nil {
		t.Fatalf("after an outage no call saw: got %v, want nil", err)
	}
}

// TestBudgetCommandsBounded counts the scripts Redis ran while four
// callers hammer one budget for a second: at most two per SyncInterval,
// whatever the rate of calls.
func TestBudgetCommandsBounded(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s.Addr())
	const interval = 50 * time.Millisecond
	b, err := NewRatioBudget(c, "rate", budget.RatioConfig{Ratio: 0.5}, BudgetOptions{Timeout: testTimeout, SyncInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	var calls [4]int
	for i := range calls {
		wg.Go(func() {
			for time.Since(start) < time.Second {
				b.RecordRequest(bg())
				b.AllowRetry(bg())
				calls[i]++
			}
		})
	}
	wg.Wait()
	if err := b.Close(bg()); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	scripts := scriptCalls(t, c)
	total := calls[0] + calls[1] + calls[2] + calls[3]
	limit := int64(2*elapsed/interval) + 2 // twice per interval, the first load, Close's flush
	t.Logf("%d calls in %v: Redis ran %d scripts (limit %d)", total, elapsed, scripts, limit)
	if scripts > limit {
		t.Fatalf("Redis ran %d scripts for %d calls in %v, want at most %d", scripts, total, elapsed, limit)
	}
	if total < 1000 {
		t.Fatalf("only %d calls: the test shows nothing", total)
	}
}
