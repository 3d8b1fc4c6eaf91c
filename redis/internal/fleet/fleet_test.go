package fleet

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The test's binary is also the fleet's server: run with serverEnv set, it
// runs Serve instead of the tests.
const serverEnv = "RETRYFUSE_FLEET_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "1" {
		os.Exit(Serve(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// startTestFleet starts a Redis of the test's own (append-only file,
// fsync always) and 4 server processes on it; they are stopped when the
// test ends, and must stop cleanly, having lost no Redis data.
func startTestFleet(t *testing.T) *Fleet {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := StartFleet(t.TempDir(), ServerOptions{Command: []string{self}, Env: []string{serverEnv + "=1"}, N: 4,
		Prefix: "fleettest:" + time.Now().Format("150405.000000") + ":"})
	if errors.Is(err, ErrNoRedis) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: the Redis tests must run)", err)
		}
		t.Skipf("%v; run scripts/redis-test", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stats, err := f.Close()
		if err != nil {
			t.Errorf("stopping the servers: %v", err)
		}
		for i, st := range stats {
			t.Logf("server %d: %+v", i, st)
			if st.DataLost > 0 || st.Unrecorded > 0 || st.CloseErr != "" {
				t.Errorf("server %d: data lost %d, steps given up %d, Close: %q; want none", i, st.DataLost, st.Unrecorded, st.CloseErr)
			}
		}
	})
	return f
}

// testPhase is a phase of 2,000 calls from 16 callers, 35% keyed writes
// (5% of them re-sent by their caller), 15% unkeyed, through the proxy's
// faults: 4% 503s, 4% resets after the server answered, 1% stalls before
// forwarding and 1% after, 2% truncated bodies. The faults are drawn
// independently: a keyed write all of whose 7 attempts are faulted (0.12
// to the 7th, one in about 3 million) ends in *ReconcileRequiredError with
// Redis healthy; with 700 keyed writes a phase, one run in about 4,000.
// The retry budget deposits half a retry per call: the Transport's
// default (a tenth), which a 2s Redis pause drains, would make the
// test about the budget (redis/BENCHMARKS.md shows both).
func testPhase(name string, declared bool, seed uint64) PhaseOptions {
	return PhaseOptions{
		Name: name,
		Load: LoadOptions{Calls: 2000, Callers: 16, Seed: seed, CallTimeout: 30 * time.Second,
			Mix:    Mix{Keyed: 0.35, Unkeyed: 0.15, Resend: 0.05},
			Client: ClientOptions{Declared: declared, MaxAttempts: 7, AttemptTimeout: 500 * time.Millisecond, BudgetRatio: 0.5}},
		Faults:    FaultRates{Unavailable: 0.04, Reset: 0.04, StallBefore: 0.01, StallAfter: 0.01, Truncate: 0.02, Stall: time.Second},
		ProxySeed: seed,
	}
}

// TestFleetAppliesEachWriteAtMostOnce: keyed writes through the fault
// proxy to 4 server processes behind the idempotency middleware on one
// Redis ledger, with a client that learns that the servers honour keys,
// then with one told so while Redis is paused 2s and then killed and
// restarted with its append-only file. The servers' own record of their
// effects counts no write applied twice; no keyed write that started once
// the client could know ends in *ReconcileRequiredError while Redis is
// healthy; every caller told 2xx had its write applied, once; and once
// every keyed write is sent again after the load, each is applied exactly
// once, or refused.
func TestFleetAppliesEachWriteAtMostOnce(t *testing.T) {
	f := startTestFleet(t)
	steady := testPhase("steady-learnt", false, 1)
	faulted := testPhase("redis-declared", true, 2)
	faulted.RedisFaults, faulted.Pause, faulted.Down = true, 2*time.Second, 500*time.Millisecond
	for _, o := range []PhaseOptions{steady, faulted} {
		res, err := RunPhase(f, o)
		if err != nil {
			t.Fatalf("%s: %v", o.Name, err)
		}
		var report strings.Builder
		res.Report(&report)
		t.Log("\n" + report.String())
		checkPhase(t, res)
	}
}

func checkPhase(t *testing.T, r *PhaseResult) {
	t.Helper()
	name := r.Options.Name
	if keyed, unkeyed := r.AppliedTwice(); keyed+unkeyed > 0 {
		t.Errorf("%s: applied twice: %d keyed writes, %d unkeyed", name, keyed, unkeyed)
	}
	if _, after := r.KeyedReconcile(); !r.Options.RedisFaults && after > 0 {
		t.Errorf("%s: %d keyed writes that started after the marker was seen ended in *ReconcileRequiredError, want 0", name, after)
	}
	if r.Load.FirstMarker.IsZero() {
		t.Errorf("%s: no caller saw the servers' marker", name)
	}
	for _, c := range r.Load.Calls {
		before, after := r.AppliedBefore[c.ID], r.Applied[c.ID]
		switch {
		case c.Outcome == OutOtherStatus || c.Outcome == OutOtherError || c.Outcome == OutConflict || c.Outcome == OutDeadline:
			t.Errorf("%s: %s %s ended in %s: %s", name, c.Kind, c.ID, c.Outcome, c.Detail)
		case c.Kind == KindKeyed && (c.Outcome == OutApplied || c.Outcome == OutReplayed || c.Outcome == OutBodyCut) && before != 1:
			t.Errorf("%s: keyed write %s ended in %s, applied %d times", name, c.ID, c.Outcome, before)
		case c.Kind == KindUnkeyed && c.Outcome == OutApplied && before != 1:
			t.Errorf("%s: unkeyed write %s ended in %s, applied %d times", name, c.ID, c.Outcome, before)
		case c.Kind == KindKeyed && after != 1 && r.Redelivered[OutOutcomeUnknown]+r.Redelivered[OutInFlight] == 0:
			t.Errorf("%s: keyed write %s applied %d times once sent again, want 1: every key answered", name, c.ID, after)
		}
	}
	var refused int
	for o, n := range r.Redelivered {
		switch Outcome(o) {
		case OutApplied, OutReplayed:
		case OutOutcomeUnknown, OutInFlight:
			refused += n // held, not run: allowed only while Redis was faulted
		default:
			if n > 0 {
				t.Errorf("%s: %d keyed writes sent again after the load ended in %s", name, n, Outcome(o))
			}
		}
	}
	if refused > 0 && !r.Options.RedisFaults {
		t.Errorf("%s: %d keyed writes sent again were refused with Redis healthy throughout", name, refused)
	}
}
