package ledgertest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/testclock"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/retryfuse/retryfuse/ledger/ledgertest"
)

// recorder is a testing.TB that records failures instead of failing the
// test: the suite is run against broken ledgers through it.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (r *recorder) Helper()             {}
func (r *recorder) Log(...any)          {}
func (r *recorder) Logf(string, ...any) {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fail()             { r.Errorf("Fail") }
func (r *recorder) FailNow()          { r.Fatalf("FailNow") }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.failures) > 0
}

// memory is a Memory whose every method runs at a virtual clock's time.
type memory struct {
	*ledger.Memory
	clock *testclock.Clock
}

func (l memory) Begin(_ context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, error) {
	return l.BeginAt(key, fp, l.clock.Now())
}

func (l memory) Complete(_ context.Context, key, token string, res *ledger.StoredResponse) error {
	if res != nil { // CompleteAt takes res as it is: give it a copy
		c := &ledger.StoredResponse{StatusCode: res.StatusCode, Header: res.Header.Clone()}
		c.Body = append([]byte(nil), res.Body...)
		res = c
	}
	return l.CompleteAt(key, token, res, l.clock.Now())
}

func (l memory) Release(_ context.Context, key, token string) error {
	return l.ReleaseAt(key, token, l.clock.Now())
}

func (l memory) Uncertain(_ context.Context, key, token string) error {
	return l.UncertainAt(key, token, l.clock.Now())
}

func (l memory) Lookup(_ context.Context, key string) (ledger.KeyInfo, error) {
	return l.LookupAt(key, l.clock.Now()), nil
}

func (l memory) List(_ context.Context, q ledger.Query) (ledger.Page, error) {
	return l.ListAt(q, l.clock.Now())
}

func (l memory) Settle(_ context.Context, key, version string, s ledger.Settlement) (ledger.KeyInfo, error) {
	return l.SettleAt(key, version, s, l.clock.Now())
}

func (l memory) Reap(_ context.Context, limit int) (int, error) {
	return l.ReapAt(limit, l.clock.Now()), nil
}

// freesUncertain is a broken ledger: a key left uncertain (by its owner
// or by its claim's expiry) is given to the next caller as free.
type freesUncertain struct{ memory }

func (l freesUncertain) Begin(ctx context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, error) {
	cl, err := l.memory.Begin(ctx, key, fp)
	if err == nil && cl.Uncertain {
		_ = l.memory.Release(ctx, key, cl.Token)
		return l.memory.Begin(ctx, key, fp)
	}
	return cl, err
}

// twoOwners is a broken ledger: a key in flight is claimed again, with a
// token of its own, by the next caller.
type twoOwners struct {
	memory
	n *atomic.Int64
}

func (l twoOwners) Begin(ctx context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, error) {
	cl, err := l.memory.Begin(ctx, key, fp)
	if err == nil && cl.State == decide.KeyInFlight && !cl.Uncertain {
		return ledger.Claim{State: decide.KeyNone, Token: fmt.Sprintf("second-owner-%d", l.n.Add(1))}, nil
	}
	return cl, err
}

// runRecorded runs the suite on the ledgers newLedger makes through a
// recorder and returns what it recorded.
func runRecorded(t *testing.T, newLedger func(*testclock.Clock, ledgertest.Config) ledger.Ledger) []string {
	clock := testclock.At(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	r := &recorder{TB: t}
	ledgertest.Run(r, func(_ testing.TB, cfg ledgertest.Config) ledger.Ledger {
		return newLedger(clock, cfg)
	}, ledgertest.Options{Advance: clock.Advance})
	return r.failures
}

func newMemory(clock *testclock.Clock, cfg ledgertest.Config) memory {
	return memory{&ledger.Memory{TTL: cfg.TTL, InFlightTTL: cfg.InFlightTTL, MaxStoredBody: cfg.MaxStoredBody}, clock}
}

func TestSuitePassesASoundLedgerThroughAnyTB(t *testing.T) {
	failures := runRecorded(t, func(c *testclock.Clock, cfg ledgertest.Config) ledger.Ledger { return newMemory(c, cfg) })
	if len(failures) != 0 {
		t.Fatalf("the suite failed ledger.Memory: %q", failures)
	}
}

// wantBroken checks that failures name promise.
func wantBroken(t *testing.T, failures []string, promise string) {
	t.Helper()
	for _, f := range failures {
		if strings.Contains(f, fmt.Sprintf("broken promise %q", promise)) {
			return
		}
	}
	t.Fatalf("the suite did not report the broken promise %q; it reported %q", promise, failures)
}

func TestSuiteFailsALedgerThatFreesAnUncertainKey(t *testing.T) {
	failures := runRecorded(t, func(c *testclock.Clock, cfg ledgertest.Config) ledger.Ledger {
		return freesUncertain{newMemory(c, cfg)}
	})
	wantBroken(t, failures, "an uncertain key is held until its outcome is known")
	wantBroken(t, failures, "a claim expires uncertain, never free, and its owner may still end it")
}

func TestSuiteFailsALedgerThatLetsTwoTokensHoldAKey(t *testing.T) {
	var n atomic.Int64
	failures := runRecorded(t, func(c *testclock.Clock, cfg ledgertest.Config) ledger.Ledger {
		return twoOwners{newMemory(c, cfg), &n}
	})
	wantBroken(t, failures, "exactly one concurrent Begin owns a free key")
}
