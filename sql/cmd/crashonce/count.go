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
)

// counts are what the database holds at the end.
type counts struct {
	effects   int // rows of the effects table
	keys      int // keys with at least one effect
	twice     int // keys with more than one effect: applied twice
	uncertain int // keys in flight or uncertain in the ledger
	completed int // keys completed in the ledger
	missing   int // keys sent and settled with no effect
	orphans   int // keys completed without an effect, or with an effect and not completed
}

func count(ctx context.Context, db *sql.DB, table string, calls int) (counts, error) {
	var c counts
	perKey := map[string]int{}
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
		perKey[k] = n
		c.effects += n
		if n > 1 {
			c.twice++
		}
	}
	rows.Close()
	c.keys = len(perKey)
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
	for i := range calls {
		if perKey[keyOf(i)] == 0 {
			c.missing++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(perKey)) {
		if !completed[k] {
			c.orphans++
		}
	}
	for k := range completed {
		if perKey[k] == 0 {
			c.orphans++
		}
	}
	return c, rows.Err()
}

func report(w io.Writer, out, settled map[string]int, c counts, kills int, p *proxy, elapsed time.Duration) {
	fmt.Fprintf(w, "%-44s %8s\n", "how the fleet's calls ended", "calls")
	for _, k := range slices.Sorted(maps.Keys(out)) {
		fmt.Fprintf(w, "  %-42s %8d\n", k, out[k])
	}
	fmt.Fprintf(w, "%-44s %8s\n", "each key sent once more, straight to a server", "keys")
	for _, k := range slices.Sorted(maps.Keys(settled)) {
		fmt.Fprintf(w, "  %-42s %8d\n", k, settled[k])
	}
	fmt.Fprintf(w, "%-44s %8s\n", "faults", "")
	fmt.Fprintf(w, "  %-42s %8d\n", "servers killed (SIGKILL) and restarted", kills)
	fmt.Fprintf(w, "  %-42s %8d\n", "503s injected by the proxy", p.n503.Load())
	fmt.Fprintf(w, "  %-42s %8d\n", "responses lost after the server answered", p.nLost.Load())
	fmt.Fprintf(w, "  %-42s %8d\n", "exchanges cut by a server's death", p.nUnreachable.Load())
	fmt.Fprintf(w, "%-44s %8s\n", "the database at the end", "")
	fmt.Fprintf(w, "  %-42s %8d\n", "effects", c.effects)
	fmt.Fprintf(w, "  %-42s %8d\n", "keys applied", c.keys)
	fmt.Fprintf(w, "  %-42s %8d\n", "keys completed in the ledger", c.completed)
	fmt.Fprintf(w, "  %-42s %8d   (must be 0)\n", "keys applied twice", c.twice)
	fmt.Fprintf(w, "  %-42s %8d   (must be 0)\n", "keys left in flight or uncertain", c.uncertain)
	fmt.Fprintf(w, "  %-42s %8d   (must be 0)\n", "keys never applied", c.missing)
	fmt.Fprintf(w, "  %-42s %8d   (must be 0)\n", "effect and completion apart", c.orphans)
	fmt.Fprintf(w, "\nrun: %s\n", elapsed.Round(time.Millisecond))
}
