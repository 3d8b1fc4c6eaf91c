package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/retryfuse/retryfuse"
)

// result is one run's: how the calls ended, the faults, and the counts.
type result struct {
	ledger       string
	foreign      bool
	calls        int
	out, settled map[string]int
	c            counts
	down         *downCounts
	kills        int
	faults       faultCounts
	downFaults   faultCounts
	elapsed      time.Duration
}

func (r result) phase() string {
	if r.foreign {
		return "foreign"
	}
	return "effect"
}

// counts are what the database (and the downstream) hold at the end.
type counts struct {
	effects   int // rows of the effects table
	keys      int // keys with at least one effect
	twice     int // keys with more than one effect: applied twice
	uncertain int // keys in flight or uncertain in the ledger
	completed int // keys completed in the ledger
	missing   int // keys sent and settled with no effect
	orphans   int // keys completed without an effect, or with an effect and not completed

	perKey map[string]int

	downTwice      int // downstream charges applied twice (or one request charged under two keys)
	effectNoCharge int // keys with an effect and no charge downstream
	chargeNoEffect int // keys charged downstream with no effect
}

// count reads the effects table; the ledger's states from its table
// (fromTable, the SQL ledger), or else from how each key settled (the
// Redis ledger: a key answered 409 outcome unknown is uncertain).
func count(ctx context.Context, db *sql.DB, table string, calls int, fromTable bool, settled map[string]int) (counts, error) {
	c := counts{perKey: map[string]int{}}
	rows, err := db.QueryContext(ctx, "SELECT idem, COUNT(*) FROM "+table+"_effects GROUP BY idem")
	if err != nil {
		return c, err
	}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			rows.Close()
			return c, err
		}
		c.perKey[k] = n
		c.effects += n
		if n > 1 {
			c.twice++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return c, err
	}
	c.keys = len(c.perKey)
	for i := range calls {
		if c.perKey[keyOf(i)] == 0 {
			c.missing++
		}
	}
	if !fromTable {
		c.completed = settled["ran now"] + settled["replayed"]
		c.uncertain = calls - c.completed
		c.orphans = -1 // not known per key: the Redis ledger's rows are not read
		return c, nil
	}
	completed := map[string]bool{}
	rows, err = db.QueryContext(ctx, "SELECT idem_key, state FROM "+table)
	if err != nil {
		return c, err
	}
	for rows.Next() {
		var k []byte
		var state int
		if err := rows.Scan(&k, &state); err != nil {
			rows.Close()
			return c, err
		}
		if state != 2 {
			c.uncertain++
			continue
		}
		c.completed++
		completed[strings.TrimPrefix(string(k), "\x00")] = true
	}
	rows.Close()
	for k := range c.perKey {
		if !completed[k] {
			c.orphans++
		}
	}
	for k := range completed {
		if c.perKey[k] == 0 {
			c.orphans++
		}
	}
	return c, rows.Err()
}

// compareDownstream counts the downstream's charges against the effects.
func (c *counts) compareDownstream(d downCounts) {
	c.downTwice = d.twice
	for k := range c.perKey {
		if !d.forKeys[k] {
			c.effectNoCharge++
		}
	}
	for k := range d.forKeys {
		if c.perKey[k] == 0 {
			c.chargeNoEffect++
		}
	}
}

// reconcileBudget names the calls that ended in *ReconcileRequiredError
// because the retry budget refused the retry that would have settled
// them (Hooks.GiveUp's reason).
var reconcileBudget = "reconcile required (given up: " + retryfuse.ReasonName(retryfuse.ErrBudgetExhausted) + ")"

// reconcileOther is the number of calls that ended in
// *ReconcileRequiredError for a reason other than the retry budget.
func (r result) reconcileOther() int {
	n := 0
	for k, v := range r.out {
		if strings.HasPrefix(k, "reconcile required") && k != reconcileBudget {
			n += v
		}
	}
	return n
}

// ok reports whether the run met its ledger's promise: with the SQL
// ledger, every key applied exactly once with its completion, none left
// uncertain, no *ReconcileRequiredError but the budget's, every charge
// downstream once with its effect; with the Redis ledger, nothing
// applied twice (its uncertain keys are counted, not failed).
func (r result) ok() bool {
	c := r.c
	if c.twice != 0 || c.downTwice != 0 {
		return false
	}
	if r.ledger == "redis" {
		return true
	}
	return c.uncertain == 0 && c.missing == 0 && c.orphans == 0 && r.reconcileOther() == 0 &&
		c.effectNoCharge == 0 && c.chargeNoEffect == 0
}

func report(w io.Writer, r result) {
	fmt.Fprintf(w, "%-52s %8s\n", "how the fleet's calls ended", "calls")
	for _, k := range slices.Sorted(maps.Keys(r.out)) {
		fmt.Fprintf(w, "  %-50s %8d\n", k, r.out[k])
	}
	fmt.Fprintf(w, "%-52s %8s\n", "each key sent once more, straight to a server", "keys")
	for _, k := range slices.Sorted(maps.Keys(r.settled)) {
		fmt.Fprintf(w, "  %-50s %8d\n", k, r.settled[k])
	}
	fmt.Fprintf(w, "%-52s\n", "faults")
	fmt.Fprintf(w, "  %-50s %8d\n", "servers killed (SIGKILL) and restarted", r.kills)
	fmt.Fprintf(w, "  %-50s %8d\n", "503s injected by the proxy", r.faults.n503)
	fmt.Fprintf(w, "  %-50s %8d\n", "responses lost after the server answered", r.faults.lost)
	fmt.Fprintf(w, "  %-50s %8d\n", "exchanges cut by a server's death", r.faults.cut)
	if r.down != nil {
		fmt.Fprintf(w, "  %-50s %8d\n", "downstream: 503s injected", r.downFaults.n503)
		fmt.Fprintf(w, "  %-50s %8d\n", "downstream: responses lost after it answered", r.downFaults.lost)
	}
	c := r.c
	fmt.Fprintf(w, "%-52s\n", "the database at the end")
	fmt.Fprintf(w, "  %-50s %8d\n", "effects", c.effects)
	fmt.Fprintf(w, "  %-50s %8d\n", "keys applied", c.keys)
	fmt.Fprintf(w, "  %-50s %8d\n", "keys completed in the ledger", c.completed)
	fmt.Fprintf(w, "  %-50s %8d   (must be 0)\n", "keys applied twice", c.twice)
	fmt.Fprintf(w, "  %-50s %8d\n", "keys left in flight or uncertain", c.uncertain)
	fmt.Fprintf(w, "  %-50s %8d\n", "keys never applied", c.missing)
	if c.orphans >= 0 {
		fmt.Fprintf(w, "  %-50s %8d\n", "effect and completion apart", c.orphans)
	}
	fmt.Fprintf(w, "  %-50s %8d\n", "*ReconcileRequiredError, not the budget's", r.reconcileOther())
	if r.down != nil {
		fmt.Fprintf(w, "%-52s\n", "the downstream's own records")
		fmt.Fprintf(w, "  %-50s %8d\n", "charges applied", r.down.charges)
		fmt.Fprintf(w, "  %-50s %8d   (must be 0)\n", "charges applied twice", c.downTwice)
		fmt.Fprintf(w, "  %-50s %8d\n", "effects without their charge", c.effectNoCharge)
		fmt.Fprintf(w, "  %-50s %8d\n", "charges without their effect", c.chargeNoEffect)
	}
	fmt.Fprintf(w, "\nrun: %s (the fleet's calls), ok: %v\n", r.elapsed.Round(time.Millisecond), r.ok())
}

// summary prints the runs side by side.
func summary(w io.Writer, rs []result) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "%-44s", "summary")
	for _, r := range rs {
		fmt.Fprintf(w, " %14s", r.ledger+" "+r.phase())
	}
	fmt.Fprintln(w)
	row := func(name string, f func(r result) string) {
		fmt.Fprintf(w, "  %-42s", name)
		for _, r := range rs {
			fmt.Fprintf(w, " %14s", f(r))
		}
		fmt.Fprintln(w)
	}
	n := func(f func(r result) int) func(r result) string {
		return func(r result) string { return fmt.Sprint(f(r)) }
	}
	row("keyed writes", n(func(r result) int { return r.calls }))
	row("servers killed (SIGKILL)", n(func(r result) int { return r.kills }))
	row("fleet's calls answered 201 (or replayed)", n(func(r result) int { return r.out["201"] + r.out["201 replayed"] }))
	row("*ReconcileRequiredError, the budget's", n(func(r result) int { return r.out[reconcileBudget] }))
	row("*ReconcileRequiredError, other", n(result.reconcileOther))
	row("other errors (throttled, budget, ...)", n(func(r result) int {
		m := 0
		for k, v := range r.out {
			if strings.HasPrefix(k, "error: ") {
				m += v
			}
		}
		return m
	}))
	row("effects applied twice", n(func(r result) int { return r.c.twice }))
	row("keys left uncertain at the end", n(func(r result) int { return r.c.uncertain }))
	row("keys never applied", n(func(r result) int { return r.c.missing }))
	row("downstream charges applied twice", func(r result) string {
		if r.down == nil {
			return "-"
		}
		return fmt.Sprint(r.c.downTwice)
	})
	row("effects without their charge", func(r result) string {
		if r.down == nil {
			return "-"
		}
		return fmt.Sprint(r.c.effectNoCharge)
	})
	row("fleet's run", func(r result) string { return r.elapsed.Round(time.Second).String() })
}
