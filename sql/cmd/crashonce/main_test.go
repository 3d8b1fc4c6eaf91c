package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain makes the test binary a server process when crashonce starts
// it as one (-serve).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		os.Exit(serveMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// Short runs of the SQL ledger, with and without a foreign call: servers
// killed every 300ms or so, and every key applied exactly once, none left
// uncertain, every downstream charge applied once.
func TestKilledServersApplyEachKeyOnce(t *testing.T) {
	dsn := os.Getenv("PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("PG_DSN is empty (CI=true: use scripts/sql-test)")
		}
		t.Skip("PG_DSN is empty; run scripts/sql-test")
	}
	for _, foreign := range []bool{false, true} {
		var out strings.Builder
		r, err := run(options{dsn: dsn, ledger: "sql", foreign: foreign, calls: 300, callers: 8, servers: 2, attempts: 8,
			killEvery: 300 * time.Millisecond, f503: 0.03, fLost: 0.05, seed: 7}, []string{os.Args[0]}, &out)
		if err != nil {
			t.Fatalf("run (foreign %v): %v\n%s", foreign, err, out.String())
		}
		t.Log("\n" + out.String())
		if c := r.c; !r.ok() || c.keys != 300 || c.completed != 300 {
			t.Errorf("foreign %v: %d keys applied, %d completed, %d twice, %d uncertain, %d never applied, %d apart, %d *ReconcileRequiredError not the budget's; want 300, 300 and 0s",
				foreign, c.keys, c.completed, c.twice, c.uncertain, c.missing, c.orphans, r.reconcileOther())
		}
		if foreign && (r.down == nil || r.down.charges != 300) {
			t.Errorf("foreign: downstream %+v, want 300 charges", r.down)
		}
	}
}
