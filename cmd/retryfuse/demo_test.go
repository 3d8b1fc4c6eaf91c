package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo once, in real time, as a user does, and checks
// that the table shows what it measured, and what holds whatever the
// timing. Its scenarios are timed by the wall clock, which a busy machine
// or the race detector bends: their claims are checked in virtual time
// (TestDemoInVirtualTime).
func TestDemo(t *testing.T) {
	deadline := time.Second
	if testing.Short() {
		deadline = 300 * time.Millisecond
	}
	var stdout, stderr bytes.Buffer
	res, code := demoMain(defaultDemoConfig(), []string{"-deadline", deadline.String()}, &stdout, &stderr)
	require.Equal(t, 0, code, "exit code; stderr: %s", stderr.String())
	assert.Empty(t, stderr.String())
	out := stdout.String()
	t.Log("\n" + out)
	checkDemoTable(t, res, out, deadline)
	// A loopback answer takes microseconds: the p50 row shows them.
	h := res.Tail
	for name, side := range map[string]tailSide{"plain": h.Plain, "fixed": h.Fixed, "derived": h.Derived} {
		assert.NotEqual(t, "0s", dur(side.P50), "%s: p50 printed as %s", name, side.P50)
	}
}

// TestDemoInVirtualTime runs the demo in a testing/synctest bubble over a
// network in memory (memNet): its servers' stalls, its callers'
// deadlines and arrivals, the breaker's interval and the overload's queue
// keep their timing however slow the machine, or the race detector, makes
// the work, and what it measures is what an idle machine would. It checks
// the demo's claims, and that the table shows them.
func TestDemoInVirtualTime(t *testing.T) {
	cfg := defaultDemoConfig()
	var (
		res            demoResults
		code           int
		stdout, stderr bytes.Buffer
	)
	synctest.Test(t, func(t *testing.T) {
		mem := newMemNet()
		cfg.listen, cfg.dial = mem.listen, mem.dial
		res, code = demoMain(cfg, nil, &stdout, &stderr)
	})
	require.Equal(t, 0, code, "exit code; stderr: %s", stderr.String())
	assert.Empty(t, stderr.String())
	out := stdout.String()
	t.Log("\n" + out)
	checkDemoTable(t, res, out, cfg.deadline)
	checkDemoClaims(t, res, cfg.deadline)
}

// checkDemoTable checks that the table shows what the run measured, and
// what holds whatever its timing.
func checkDemoTable(t *testing.T, res demoResults, out string, deadline time.Duration) {
	t.Run("storm", func(t *testing.T) {
		s := res.Storm
		assert.Equal(t, 100, s.Callers)
		assert.LessOrEqual(t, s.FusePerCaller(), 1.2, "retryfuse: requests per caller")
		assert.Less(t, s.FusePerCaller(), s.PlainPerCaller(), "retryfuse against the plain loop: requests per caller")
		assert.Greater(t, s.PlainPerCaller(), 2.0, "the plain loop retries every caller")
		// The defaults refuse no caller before sending (the throttle is
		// off unless asked for): every caller is recorded by the budget
		// and gets the 503 back, as from the plain loop.
		assert.Zero(t, s.FuseThrottled, "callers refused before sending")
		assert.Equal(t, uint64(s.Callers), s.FuseBudget.Requests, "budget snapshot: requests recorded")
		assert.Equal(t, int64(s.Callers), s.FuseGot503, "callers that got the 503 back")
		assert.LessOrEqual(t, s.FuseBudget.Retries, uint64(s.Callers/10+10), "budget snapshot: retries granted, at most 10% plus the reserve")
		// An attempt that timed out before the server counted it was still
		// made: the server's count can fall short of the attempts, never
		// exceed them.
		assert.LessOrEqual(t, uint64(s.FuseSent), s.FuseBudget.Requests+s.FuseBudget.Retries, "requests received against attempts made")
		assertRow(t, out, "callers that got the 503 back", s.PlainGot503, s.FuseGot503)
		assertRow(t, out, "callers refused before sending", 0, s.FuseThrottled)
		assertRow(t, out, "requests the dependency received", s.PlainSent, s.FuseSent)
		assertRow(t, out, "requests per caller (amplification)", fmt.Sprintf("%.2f", s.PlainPerCaller()), fmt.Sprintf("%.2f", s.FusePerCaller()))
		// The Snapshot counts calls (first attempts) and retries apart; the
		// dependency counts every request. The table says which is which.
		b := s.FuseBudget
		assertLine(t, out, fmt.Sprintf("(Snapshot): %d calls recorded (one first attempt each; not the refused),", b.Requests))
		assertLine(t, out, fmt.Sprintf("%d retries granted, %d retries refused,", b.Retries, b.Refused))
		assertLine(t, out, fmt.Sprintf("retryfuse sent %d first attempts + %d retries = %d requests; the dependency counted %d of them",
			b.Requests, b.Retries, b.Requests+b.Retries, s.FuseSent))
	})

	t.Run("lost response", func(t *testing.T) {
		l := res.Lost
		// Never twice, whatever the timing; once, and the reconcile error,
		// are checked in virtual time (a stall past the attempt timeout
		// before the write is an attempt that was not sent).
		assert.LessOrEqual(t, l.FuseApplied, 1, "retryfuse: times applied")
		assertRow(t, out, "times the payment was applied", l.PlainApplied, l.FuseApplied)
	})

	t.Run("Retry-After", func(t *testing.T) {
		a := res.RetryAfter
		assert.Equal(t, deadline, a.Deadline)
		assert.Equal(t, "context deadline exceeded", a.PlainOutcome)
		assert.Equal(t, "503 Service Unavailable", a.FuseOutcome)
		assert.Equal(t, "retry_after_too_long", retryfuse.ReasonName(a.FuseReason), "GiveUp reason: got %v", a.FuseReason)
		assert.Equal(t, int64(1), a.FuseSent)
		assertRow(t, out, "time until control came back", dur(a.PlainElapsed), dur(a.FuseElapsed))
	})

	t.Run("exactly once", func(t *testing.T) {
		e := res.Exactly
		// The middleware runs a key's request once at most, whatever the
		// timing; the rest of the story is checked in virtual time.
		assert.LessOrEqual(t, e.FuseApplied, 1, "retryfuse: times applied")
		assert.LessOrEqual(t, e.PlainApplied, 1, "plain loop: the middleware runs the key's request once at most")
		assertRow(t, out, "times applied, behind the middleware", e.PlainApplied, e.FuseApplied)
	})

	t.Run("crash mid-request", func(t *testing.T) {
		// Nothing here waits on a timer: the panic ends the first run at
		// once, whatever the machine's speed.
		c := res.Crash
		assert.Equal(t, 1, c.Own.Runs, "own ledger: the handler runs once; its key is left uncertain")
		assert.Equal(t, 1, c.Own.Applied, "own ledger: charges")
		assert.Equal(t, "*ReconcileRequiredError", c.Own.Outcome, "own ledger: the caller reconciles")
		assert.True(t, c.Own.KeyStuck, "own ledger: a later call under the key reconciles too")
		assert.Equal(t, 2, c.Tx.Runs, "transactional: the first run rolled back, the repeat ran")
		assert.Equal(t, 1, c.Tx.Applied, "transactional: charges")
		assert.Equal(t, "201 Created", c.Tx.Outcome, "transactional: the caller gets the charge")
		assert.False(t, c.Tx.KeyStuck, "transactional: a later call gets the stored response")
		assertRow(t, out, "charges in the database", c.Own.Applied, c.Tx.Applied)
		assertRow(t, out, "what retryfuse's caller got", c.Own.Outcome, c.Tx.Outcome)
	})

	t.Run("brake", func(t *testing.T) {
		k := res.Brake
		assert.GreaterOrEqual(t, k.Breaker.FirstOK, k.DownFor, "no 200 before the dependency recovered")
		assertRow(t, out, "requests received while it was down", k.Plain.SentDown, k.Breaker.SentDown, k.Budget.SentDown)
	})

	t.Run("tail latency", func(t *testing.T) {
		h := res.Tail
		assert.Equal(t, tailCalls, h.Calls)
		assert.Equal(t, int64(h.Calls), h.Plain.Sent, "the plain client sends one request per call")
		// One request in 20 is held: the plain client's p99 is a held one.
		assert.GreaterOrEqual(t, h.Plain.P99, tailSlowFor, "plain client: p99")
		for name, side := range map[string]tailSide{"fixed": h.Fixed, "derived": h.Derived} {
			// Every hedge takes a retry from a budget.Ratio: 10% of the
			// calls plus its reserve (1/s over its 10s window).
			assert.LessOrEqual(t, side.Sent, int64(h.Calls+h.Calls/10+10), "%s: requests, bounded by the budget", name)
		}
		assertRow(t, out, "extra requests", pct(h.Plain.Extra(h.Calls)), pct(h.Fixed.Extra(h.Calls)), pct(h.Derived.Extra(h.Calls)))
		assertRow(t, out, "p50 latency", dur(h.Plain.P50), dur(h.Fixed.P50), dur(h.Derived.P50))
	})

	t.Run("overload", func(t *testing.T) {
		o := res.Overload
		assertRow(t, out, "requests received during the overload", o.Plain.Received, o.Static.Received, o.Adaptive.Received)
		assertRow(t, out, "work done for callers who had gone", pct0(o.Plain.WastedShare()), pct0(o.Static.WastedShare()), pct0(o.Adaptive.WastedShare()))
		assertRow(t, out, "calls succeed again after the overload", back(o.Plain.Recovered), back(o.Static.Recovered), back(o.Adaptive.Recovered))
	})
}

// checkDemoClaims checks what the demo claims of its scenarios' timing:
// in virtual time, where nothing but the scenario decides it.
func checkDemoClaims(t *testing.T, res demoResults, deadline time.Duration) {
	t.Run("lost response claims", func(t *testing.T) {
		l := res.Lost
		assert.Equal(t, 1, l.FuseApplied, "retryfuse: times applied")
		assert.Greater(t, l.PlainApplied, 1, "plain loop: times applied")
		require.NotNil(t, l.Reconcile, "retryfuse returns a *ReconcileRequiredError")
		assert.Equal(t, "order-1002", l.Reconcile.IdempotencyKey)
		assert.Equal(t, 1, l.Reconcile.Attempts)
		assert.Equal(t, 1, l.LookupApplied, "the lookup by key finds the payment applied once")
	})

	t.Run("exactly once claims", func(t *testing.T) {
		e := res.Exactly
		assert.Equal(t, 1, e.FuseApplied, "retryfuse: times applied")
		assert.Equal(t, 1, e.PlainApplied, "plain loop: the middleware runs the key's request once")
		assert.Equal(t, "201 Created", e.FuseOutcome, "retryfuse's caller gets the payment, not a reconcile error")
		assert.Greater(t, e.FuseAttempts, 1, "retryfuse repeated the uncertain write")
		assert.True(t, e.FuseReplayed, "its answer is the stored response")
	})

	t.Run("Retry-After claims", func(t *testing.T) {
		a := res.RetryAfter
		assert.GreaterOrEqual(t, a.PlainElapsed, deadline, "the plain loop waits out the caller's deadline")
		assert.Less(t, a.FuseElapsed, deadline/100, "retryfuse hands back control at once")
	})

	t.Run("brake claims", func(t *testing.T) {
		k := res.Brake
		assert.Less(t, k.Breaker.SentDown, k.Plain.SentDown/10, "requests while down: breaker against the plain loop")
		assert.Less(t, k.Breaker.SentDown, k.Budget.SentDown, "requests while down: breaker against the budget alone")
		assert.Positive(t, k.Breaker.FastFails, "calls failed fast")
		assert.Positive(t, k.Breaker.SentUp, "the breaker let traffic through after recovery")
		require.NotEmpty(t, k.Transitions)
		first, last := k.Transitions[0], k.Transitions[len(k.Transitions)-1]
		assert.Equal(t, [2]breaker.State{breaker.Closed, breaker.Open}, [2]breaker.State{first.From, first.To}, "first transition")
		for i := 1; i < len(k.Transitions); i++ {
			assert.GreaterOrEqual(t, k.Transitions[i].At, k.Transitions[i-1].At, "transitions in order")
		}
		assert.Equal(t, [2]breaker.State{breaker.HalfOpen, breaker.Closed}, [2]breaker.State{last.From, last.To}, "last transition")
		assert.GreaterOrEqual(t, last.At, k.DownFor, "closed only after the dependency recovered")
	})

	t.Run("tail latency claims", func(t *testing.T) {
		h := res.Tail
		for name, side := range map[string]tailSide{"plain": h.Plain, "fixed": h.Fixed, "derived": h.Derived} {
			assert.Zero(t, side.Failed, "%s: calls without a 200", name)
		}
		for name, side := range map[string]tailSide{"fixed": h.Fixed, "derived": h.Derived} {
			assert.Greater(t, side.Sent, int64(h.Calls), "%s: hedges were sent", name)
			assert.LessOrEqual(t, side.P99, tailHedgeDelay, "%s: p99 at most the hedge delay, against the held requests' %v", name, tailSlowFor)
		}
		assert.Less(t, h.Derived.P99, h.Fixed.P99, "a delay at the observed p95 hedges sooner than the fixed one")
	})

	t.Run("overload claims", func(t *testing.T) {
		o := res.Overload
		// The plain loop's queue outgrows the deadlines: most of the work
		// is for callers who had gone, its goodput is a fraction of what
		// the workers can do, and it is still draining when the load
		// falls.
		assert.Greater(t, o.Plain.WastedShare(), 0.5, "plain loop: work done for callers who had gone")
		assert.Less(t, o.Plain.Goodput, overloadCapacity/2, "plain loop: goodput")
		assert.Zero(t, o.Plain.Refused, "the plain loop refuses nothing")
		assert.Equal(t, time.Duration(-1), o.Plain.Recovered, "the plain loop's calls still fail when the load falls")
		// Either bulkhead keeps the queue short: the workers stay busy
		// with calls whose callers still wait, the rest is refused at once,
		// and the calls succeed as soon as the load falls.
		for name, s := range map[string]overloadSide{"MaxInFlight": o.Static, "AdaptiveInFlight": o.Adaptive} {
			assert.Less(t, s.WastedShare(), 0.05, "%s: work done for callers who had gone", name)
			assert.Greater(t, s.Goodput, 0.9*overloadCapacity, "%s: goodput, against the workers' %v/s", name, overloadCapacity)
			assert.Greater(t, s.Goodput, 2*o.Plain.Goodput, "%s: goodput, against the plain loop's", name)
			assert.Less(t, s.P99, o.Plain.P99, "%s: p99 of the calls that succeeded, against the plain loop's", name)
			assert.Less(t, s.Received, o.Plain.Received/2, "%s: requests received, against the plain loop's retries", name)
			assert.Positive(t, s.Refused, "%s: calls refused during the overload", name)
			assert.Zero(t, s.Recovered, "%s: the calls succeed at once when the load falls", name)
		}
	})
}

// assertRow checks that the table has a row label whose cells are want.
func assertRow(t *testing.T, out, label string, want ...any) {
	t.Helper()
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), label)
		if !ok {
			continue
		}
		var cells []string
		for _, w := range want {
			cells = append(cells, fmt.Sprint(w))
		}
		assert.Equal(t, strings.Join(cells, " "), strings.Join(strings.Fields(rest), " "), "row %q", label)
		return
	}
	t.Errorf("no row %q in the table", label)
}

// assertLine checks that a line of the table contains want.
func assertLine(t *testing.T, out, want string) {
	t.Helper()
	for line := range strings.Lines(out) {
		if strings.Contains(line, want) {
			return
		}
	}
	t.Errorf("no line with %q in the table", want)
}

func TestDemoServerCannotStart(t *testing.T) {
	cfg := defaultDemoConfig()
	cfg.listen = func() (net.Listener, error) { return nil, errors.New("no loopback here") }
	var stdout, stderr bytes.Buffer
	_, code := demoMain(cfg, nil, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "cannot start the")
	assert.Contains(t, stderr.String(), "no loopback here")
	assert.Empty(t, stdout.String(), "no table without measurements")
}

func TestDemoBadArguments(t *testing.T) {
	for _, args := range [][]string{{"extra"}, {"-callers", "0"}, {"-deadline", "-1s"}, {"-nosuchflag"}} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, 2, runDemo(args, &stdout, &stderr), "args %q", args)
		assert.NotEmpty(t, stderr.String(), "args %q: a message on stderr", args)
		assert.Empty(t, stdout.String(), "args %q", args)
	}
}
