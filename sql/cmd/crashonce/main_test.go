package main

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain makes the test binary a server process when crashonce starts
// it as one (-serve).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		fs := flag.NewFlagSet("serve", flag.ExitOnError)
		dsn, table := fs.String("dsn", "", ""), fs.String("table", "", "")
		fs.Bool("serve", true, "")
		_ = fs.Parse(os.Args[1:])
		os.Exit(serve(*dsn, *table))
	}
	os.Exit(m.Run())
}

// A short run: servers killed every 300ms or so, and every key applied
// exactly once, none left uncertain.
func TestKilledServersApplyEachKeyOnce(t *testing.T) {
	dsn := os.Getenv("PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("PG_DSN is empty (CI=true: use scripts/sql-test)")
		}
		t.Skip("PG_DSN is empty; run scripts/sql-test")
	}
	var out strings.Builder
	c, err := run(options{dsn: dsn, calls: 300, callers: 8, servers: 2, attempts: 8, killEvery: 300 * time.Millisecond,
		f503: 0.03, fLost: 0.05, seed: 7}, []string{os.Args[0]}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if !c.ok() || c.keys != 300 || c.completed != 300 {
		t.Errorf("counts %+v: want 300 keys applied once and completed, none twice, none uncertain", c)
	}
}
