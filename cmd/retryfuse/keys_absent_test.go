package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	retryfusesql "github.com/retryfuse/retryfuse/sql"
)

// An operator who names a store that holds no ledger (a mistyped --table,
// --prefix or database file) is told so, and nothing is made there: the
// command never answers "0 stuck keys" for a ledger it created itself.
func TestKeysRefusesAStoreWithoutALedgerAndMakesNothingThere(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dsn := "file:" + filepath.Join(t.TempDir(), "other.db")
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		sqlStore(t, "sqlite", dsn, "retryfuse_keys", retryfusesql.SQLite) // a ledger beside it, under its own name
		for _, cmd := range [][]string{{"list"}, {"show", "--key", "k"}, {"reap"}, {"settle", "--key", "k", "--expect", "uncertain", "--not-applied"}} {
			args := append([]string{"keys", cmd[0], "--sql", dsn, "--driver", "sqlite", "--table", "retryfuse_key"}, cmd[1:]...)
			r := runWith("", args...)
			if r.code != 1 || !strings.Contains(r.stderr, "retryfuse_key") || !strings.Contains(r.stderr, "no ledger") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 and the table named as holding no ledger", args, r.code, r.stdout, r.stderr)
			}
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE tbl_name IN ('retryfuse_key', 'retryfuse_key_schema')`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("tables made under the mistyped name: %d (%v), want none", n, err)
		}
	})
	t.Run("redis", func(t *testing.T) {
		addr := needEnv(t, "REDIS_ADDR")
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		prefix := "rfabsent:" + rand.Text()[:10] + ":"
		r := runWith("", "keys", "list", "--redis", addr, "--prefix", prefix)
		if r.code != 1 || !strings.Contains(r.stderr, prefix) || !strings.Contains(r.stderr, "no ledger") {
			t.Errorf("list under an unused prefix: exit %d, stdout %q, stderr %q; want 1 and the prefix named as holding no ledger", r.code, r.stdout, r.stderr)
		}
		keys, err := client.Keys(context.Background(), prefix+"*").Result()
		if err != nil || len(keys) != 0 {
			t.Fatalf("keys made under the unused prefix: %q (%v), want none", keys, err)
		}
	})
}
