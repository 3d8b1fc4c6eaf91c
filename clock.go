package retryfuse

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is the one clock of a Transport. A call reads it once per step
// (the start of an attempt, the scheduling of a retry) and hands that time
// to the gates, in the manner of golang.org/x/time/rate: the breaker, the
// budgets and the ledger.Memory take the time as an argument in their
// methods ending in At, and read the real clock only when called otherwise.

// clock tells the time and waits.
type clock interface {
	Now() time.Time
	// Sleep waits for d, or until ctx is done, and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// realClock is the wall clock.
type realClock struct{}

// Now returns the current time. It reads only the monotonic clock, and
// adds what it shows to a full reading of both clocks, taken again once
// that reading is clockRebase old: time.Now reads the wall clock as well,
// and on virtual machines each reading costs about as much as a gate's
// whole work. The monotonic part is exact, so every duration and ordering
// is; the wall part lags a step of the system's wall clock (an NTP
// correction) by clockRebase at most, which is below what a Retry-After
// date or a ledger's time to live can tell.
func (realClock) Now() time.Time {
	if b := clockBase.Load(); b != nil {
		if d := time.Since(*b); d >= 0 && d < clockRebase {
			return b.Add(d)
		}
	}
	now := time.Now()
	clockBase.Store(&now)
	return now
}

// clockBase is the latest full reading of the clock; see realClock.Now.
var clockBase atomic.Pointer[time.Time]

// clockRebase is how long a full reading serves as the base of others.
const clockRebase = time.Second

// NewTimer returns a timer of the runtime: an alarm on the wall clock
// needs no goroutine (internal/alarm).
func (realClock) NewTimer(d time.Duration) *time.Timer { return time.NewTimer(d) }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// now returns the time of the call's current step, reading the clock on
// the step's first need. A step — the call's start, an attempt's
// admission, its end, a retry's scheduling — reads the clock once at most,
// and every gate and hook of the step takes that reading: on some machines
// a reading costs more than the rest of a gate's work.
func (c *call) now() time.Time {
	if c.at.IsZero() {
		c.at = c.p.clock.Now()
	}
	return c.at
}

// step begins a new step of the call: the next reading is fresh. It is
// taken where time has passed since the last: before an attempt is
// admitted, when it returns, before a retry is scheduled, after a wait.
func (c *call) step() { c.at = time.Time{} }

// timedBudget is a budget of this package: it takes the time as an
// argument.
type timedBudget interface {
	RecordRequestAt(now time.Time)
	AllowRetryAt(now time.Time) bool
}

// clockedBudget runs a timedBudget on a Transport's clock.
type clockedBudget struct {
	b     timedBudget
	clock clock
}

func (c clockedBudget) RecordRequest(context.Context) { c.b.RecordRequestAt(c.clock.Now()) }

func (c clockedBudget) AllowRetry(context.Context) (bool, error) {
	return c.b.AllowRetryAt(c.clock.Now()), nil
}

// budgetOn returns b running on clk when b is one of this package's
// budgets, and b itself otherwise.
func budgetOn(b budget.Budget, clk clock) budget.Budget {
	if tb, ok := b.(timedBudget); ok {
		return clockedBudget{tb, clk}
	}
	return b
}

// clockedLedger runs a ledger.Memory on a Transport's clock.
type clockedLedger struct {
	l     *ledger.Memory
	clock clock
}

func (c clockedLedger) Begin(_ context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, error) {
	return c.l.BeginAt(key, fp, c.clock.Now())
}

// Complete keeps res without a copy: the Transport, its only caller, hands
// it a result it has just made (or nil) and never touches it again.
func (c clockedLedger) Complete(_ context.Context, key, token string, res *ledger.StoredResponse) error {
	return c.l.CompleteAt(key, token, res, c.clock.Now())
}

func (c clockedLedger) Release(_ context.Context, key, token string) error {
	return c.l.ReleaseAt(key, token, c.clock.Now())
}

func (c clockedLedger) Uncertain(_ context.Context, key, token string) error {
	return c.l.UncertainAt(key, token, c.clock.Now())
}

// ledgerOn returns l running on clk when l is a ledger.Memory, and l
// itself otherwise.
func ledgerOn(l ledger.Ledger, clk clock) ledger.Ledger {
	if ml, ok := l.(*ledger.Memory); ok {
		return clockedLedger{ml, clk}
	}
	return l
}
