// Command exactlyonce sends keyed writes, unkeyed writes and GETs through a
// fault proxy to server processes behind the idempotency middleware on
// one Redis ledger, and counts, from the servers' own record of their
// effects, the writes applied twice; and how every call ended for its
// caller. It starts a redis-server (append-only file, fsync always) and
// the servers (this binary again, with -serve) on loopback.
//
// Phases, each with keys of its own, through one fleet:
//
//   - steady: the proxy's faults only (resets after the server answered,
//     stalls before and after forwarding, truncated bodies, 503s);
//   - redis: the same, and Redis paused (SIGSTOP) for -pause once a
//     quarter of the calls have ended, killed (SIGKILL) once half have,
//     and restarted -down later, reloading its append-only file.
//
// Each phase runs with the client learning that the servers honour keys
// (HonourMemory's default), or told so (Keys.ServerHonours), or both in
// turn (-honour); or never learning it (HonourMemory -1), as clients did
// before servers honoured keys: every uncertain keyed write then ends in
// *ReconcileRequiredError. After each phase every keyed write is sent once more,
// straight to the servers: answered by a replay, or run now if it never
// was, never run twice.
//
// Usage, from the repository root:
//
//	go run ./redis/cmd/exactlyonce [-calls 20000] [-callers 16] [-servers 4] [-honour both] [-throttle=false]
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/retryfuse/retryfuse/redis/internal/fleet"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		os.Exit(fleet.Serve(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	calls := flag.Int("calls", 20000, "calls per phase")
	callers := flag.Int("callers", 16, "concurrent callers")
	servers := flag.Int("servers", 4, "server processes")
	keyed := flag.Float64("keyed", 0.35, "share of keyed writes")
	unkeyed := flag.Float64("unkeyed", 0.15, "share of unkeyed writes")
	resend := flag.Float64("resend", 0.05, "share of the keyed writes that re-send a key sent before")
	attempts := flag.Int("attempts", 7, "Transport.MaxAttempts")
	attemptTimeout := flag.Duration("attempt-timeout", 500*time.Millisecond, "Transport.AttemptTimeout")
	budget := flag.Float64("budget-ratio", 0, "the retry budget's Ratio (0: the Transport's default budget, 0.1)")
	ledgerTimeout := flag.Duration("ledger-timeout", 0, "the servers' LedgerConfig.Timeout (0: the default, 50ms)")
	phases := flag.String("phases", "steady,redis", "phases to run, in order: steady, redis")
	honour := flag.String("honour", "both", "the client: learnt (Keys.HonourMemory's default), declared (Keys.ServerHonours), unaware (Keys.HonourMemory -1, as before servers honoured keys), both (learnt and declared) or all")
	pause := flag.Duration("pause", 2*time.Second, "how long Redis is paused in the redis phase")
	down := flag.Duration("down", 500*time.Millisecond, "how long Redis stays killed in the redis phase")
	seed := flag.Uint64("seed", 1, "seed of the calls and of the proxy's faults")
	bare := flag.Bool("bare", false, "servers without the Idempotency-Key middleware (the client's -honour still as given; callers re-send no key, and nothing is redelivered)")
	throttle := flag.Bool("throttle", true, "leave the Transport's throttle of new calls on, as it is by default (false: DisableThrottle)")
	var rates fleet.FaultRates
	flag.Float64Var(&rates.Unavailable, "f503", 0.04, "share of exchanges answered 503 by the proxy")
	flag.Float64Var(&rates.Reset, "freset", 0.04, "share of exchanges reset after the server answered")
	flag.Float64Var(&rates.StallBefore, "fstall-before", 0.01, "share of exchanges stalled before forwarding")
	flag.Float64Var(&rates.StallAfter, "fstall-after", 0.01, "share of exchanges stalled after the server answered")
	flag.Float64Var(&rates.Truncate, "ftruncate", 0.02, "share of exchanges whose response body is cut")
	flag.Parse()
	rates.Stall = 2 * *attemptTimeout

	var modes []string
	switch *honour {
	case "unaware", "learnt", "declared":
		modes = []string{*honour}
	case "both":
		modes = []string{"learnt", "declared"}
	case "all":
		modes = []string{"unaware", "learnt", "declared"}
	default:
		fmt.Fprintln(os.Stderr, "exactlyonce: -honour is unaware, learnt, declared, both or all")
		os.Exit(2)
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	dir, err := os.MkdirTemp("", "exactlyonce")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	f, err := fleet.StartFleet(dir, fleet.ServerOptions{
		Command: []string{self, "-serve"}, N: *servers, Prefix: "exactlyonce:" + stamp + ":", LedgerTimeout: *ledgerTimeout, Bare: *bare,
	})
	if err != nil {
		fail(err)
	}
	fmt.Printf("exactlyonce: %d server processes on one Redis (%s, appendfsync always), a fault proxy, %d callers; %d calls a phase: %.0f%% keyed writes (%.0f%% of them re-sent by their caller), %.0f%% unkeyed writes, the rest GETs\n\n",
		*servers, f.Redis.Addr(), *callers, *calls, 100**keyed, 100**resend, 100**unkeyed)
	failed := false
	for i, name := range strings.Split(*phases, ",") {
		for j, mode := range modes {
			o := fleet.PhaseOptions{
				Name: name + "-" + mode,
				Load: fleet.LoadOptions{
					Calls: *calls, Callers: *callers, Seed: *seed + uint64(10*i+j), CallTimeout: 30 * time.Second,
					Mix:    fleet.Mix{Keyed: *keyed, Unkeyed: *unkeyed, Resend: *resend},
					Client: fleet.ClientOptions{Declared: mode == "declared", Unaware: mode == "unaware", MaxAttempts: *attempts, AttemptTimeout: *attemptTimeout, BudgetRatio: *budget, Throttle: *throttle},
				},
				Faults: rates, ProxySeed: *seed + uint64(10*i+j), NoRedelivery: *bare,
			}
			if *bare {
				// A server that does not honour keys applies a caller's
				// re-send again: that is the caller's doing, not the
				// Transport's, and is left out.
				o.Load.Mix.Resend = 0
				o.Name += "-bare"
			}
			switch name {
			case "steady":
			case "redis":
				o.RedisFaults, o.Pause, o.Down = true, *pause, *down
			default:
				fail(fmt.Errorf("unknown phase %q", name))
			}
			res, err := fleet.RunPhase(f, o)
			if err != nil {
				fail(err)
			}
			res.Report(os.Stdout)
			if k, u := res.AppliedTwice(); k+u > 0 {
				failed = true
			}
		}
	}
	stats, err := f.Close()
	for i, st := range stats {
		fmt.Printf("server %d: applied %d, Begin failed (503) %d, outcome not recorded at once %d, steps given up %d, data lost %d, Close: %s\n",
			i, st.Applied, st.BeginFailed, st.RecordFailed, st.Unrecorded, st.DataLost, orNone(st.CloseErr))
	}
	if err != nil {
		fail(err)
	}
	if failed {
		fmt.Println("exactlyonce: a write was applied twice")
		os.Exit(1)
	}
}

func orNone(s string) string {
	if s == "" {
		return "ok"
	}
	return s
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "exactlyonce:", err)
	os.Exit(1)
}
