package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
	retryfuseredis "github.com/retryfuse/retryfuse/redis"
	retryfusesql "github.com/retryfuse/retryfuse/sql"
)

// The keys commands run against SQLite always (a file of the test's own),
// and against Redis and PostgreSQL when REDIS_ADDR and PG_DSN name them:
// scripts/redis-test and scripts/sql-test run these tests with them set
// (scripts/test runs the command's module without them first).

// keysStore is a store the command is pointed at, and a ledger of the
// services' on the same keys.
type keysStore struct {
	args   []string
	ledger ledger.Ledger
}

func needEnv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s is empty; scripts/redis-test and scripts/sql-test set it", name)
	}
	return v
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func sqlStore(t *testing.T, driver, dsn, table string, dialect retryfusesql.Dialect) keysStore {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	l, err := retryfusesql.NewLedger(testCtx(t), db, retryfusesql.LedgerConfig{Dialect: dialect, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	name := map[retryfusesql.Dialect]string{retryfusesql.SQLite: "sqlite", retryfusesql.Postgres: "postgres"}[dialect]
	return keysStore{args: []string{"--sql", dsn, "--driver", name, "--table", table}, ledger: l}
}

// eachStore runs f on SQLite, PostgreSQL and Redis.
func eachStore(t *testing.T, f func(t *testing.T, s keysStore)) {
	t.Run("sqlite", func(t *testing.T) {
		dsn := "file:" + filepath.Join(t.TempDir(), "keys.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
		f(t, sqlStore(t, "sqlite", dsn, "retryfuse_keys", retryfusesql.SQLite))
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := needEnv(t, "PG_DSN")
		table := "rfkeys_" + strings.ToLower(rand.Text()[:10])
		s := sqlStore(t, "pgx", dsn, table, retryfusesql.Postgres)
		t.Cleanup(func() {
			db, err := sql.Open("pgx", dsn)
			if err == nil {
				_, _ = db.Exec("DROP TABLE IF EXISTS " + table + ", " + table + "_schema")
				_ = db.Close()
			}
		})
		f(t, s)
	})
	t.Run("redis", func(t *testing.T) {
		addr := needEnv(t, "REDIS_ADDR")
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		prefix := "rfkeys:" + rand.Text()[:10] + ":"
		l, err := retryfuseredis.NewLedger(client, retryfuseredis.LedgerConfig{Prefix: prefix, Timeout: 5 * time.Second, AllowWithoutPersistence: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		f(t, keysStore{args: []string{"--redis", addr, "--prefix", prefix}, ledger: l})
	})
}

func (s keysStore) run(t *testing.T, args ...string) result {
	t.Helper()
	return runWith("", append(append([]string{"keys"}, args[0]), append(append([]string(nil), s.args...), args[1:]...)...)...)
}

var fp = ledger.Fingerprint{7}

// stuck leaves key uncertain, as a call whose outcome was lost does.
func (s keysStore) stuck(t *testing.T, key string) {
	t.Helper()
	cl, err := s.ledger.Begin(testCtx(t), key, fp)
	if err != nil || cl.State != decide.KeyNone {
		t.Fatalf("Begin(%q): %v %v", key, cl.State, err)
	}
	if err := s.ledger.Uncertain(testCtx(t), key, cl.Token); err != nil {
		t.Fatal(err)
	}
}

func showJSON(t *testing.T, s keysStore, key string) keyView {
	t.Helper()
	r := s.run(t, "show", "--key", key, "--json")
	var v keyView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("show --json: %v (stdout %q, stderr %q)", err, r.stdout, r.stderr)
	}
	return v
}

func TestKeysFindsStuckKeysAndSettlesThem(t *testing.T) {
	eachStore(t, func(t *testing.T, s keysStore) {
		c := testCtx(t)
		s.stuck(t, "order-1")
		s.stuck(t, "order-2")
		if cl, err := s.ledger.Begin(c, "order-3", fp); err != nil || s.ledger.Complete(c, "order-3", cl.Token, nil) != nil {
			t.Fatalf("order-3: %v", err)
		}
		if _, err := s.ledger.Begin(c, "order-4", fp); err != nil { // in flight
			t.Fatal(err)
		}

		r := s.run(t, "list")
		if r.code != 0 || !strings.Contains(r.stdout, "3 stuck keys\n") || strings.Contains(r.stdout, "order-3") {
			t.Fatalf("list: exit %d, stdout %q, stderr %q; want the 3 stuck keys, not the completed one", r.code, r.stdout, r.stderr)
		}
		r = s.run(t, "list", "--state", "uncertain", "--json")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) != 2 {
			t.Fatalf("list --state uncertain --json: exit %d, stdout %q; want 2 lines", r.code, r.stdout)
		}
		for _, line := range lines {
			var v keyView
			if err := json.Unmarshal([]byte(line), &v); err != nil || v.State != ledger.StateUncertain || v.Since == nil {
				t.Fatalf("list --json line %q: %v; want an uncertain key with its time", line, err)
			}
		}
		if r = s.run(t, "list", "--older-than", "1h"); r.code != 0 || !strings.Contains(r.stdout, "0 stuck keys older than 1h0m0s\n") {
			t.Fatalf("list --older-than 1h: exit %d, stdout %q; want none", r.code, r.stdout)
		}

		// Settled as applied, with the result found: a repeat is replayed.
		seen := showJSON(t, s, "order-1")
		body := filepath.Join(t.TempDir(), "body.json")
		if err := os.WriteFile(body, []byte(`{"id":"ch_1"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		r = s.run(t, "settle", "--key", "order-1", "--expect", "uncertain", "--version", seen.Version,
			"--applied", "--status", "201", "--header", "Content-Type: application/json", "--body-file", body)
		if r.code != 0 || !strings.Contains(r.stdout, "settled") {
			t.Fatalf("settle --applied: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		cl, err := s.ledger.Begin(c, "order-1", fp)
		if err != nil || cl.State != decide.KeyCompleted || cl.Stored == nil || cl.Stored.StatusCode != 201 ||
			string(cl.Stored.Body) != `{"id":"ch_1"}` || cl.Stored.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("a repeat under the settled key: %+v %+v %v; want the settled 201 replayed", cl, cl.Stored, err)
		}
		// Its old version is stale now.
		r = s.run(t, "settle", "--key", "order-1", "--expect", "uncertain", "--version", seen.Version, "--not-applied")
		if r.code != 1 || !strings.Contains(r.stdout, "completed") {
			t.Fatalf("settle at a stale version: exit %d, stdout %q; want 1 and the key found completed", r.code, r.stdout)
		}

		// The wrong expected state is refused; the right one frees the key.
		if r = s.run(t, "settle", "--key", "order-2", "--expect", "in_flight", "--not-applied"); r.code != 1 || !strings.Contains(r.stdout, "uncertain") {
			t.Fatalf("settle --expect in_flight of an uncertain key: exit %d, stdout %q; want 1 and the state found", r.code, r.stdout)
		}
		if r = s.run(t, "settle", "--key", "order-2", "--expect", "uncertain", "--not-applied"); r.code != 0 {
			t.Fatalf("settle --not-applied: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if cl, err := s.ledger.Begin(c, "order-2", fp); err != nil || cl.State != decide.KeyNone {
			t.Fatalf("a repeat under a key settled as not applied: %v %v; want it free", cl.State, err)
		}

		if r = s.run(t, "show", "--key", "never-used"); r.code != 1 || !strings.Contains(r.stdout, "free") {
			t.Fatalf("show of a free key: exit %d, stdout %q; want 1", r.code, r.stdout)
		}
		if r = s.run(t, "reap"); r.code != 0 || !strings.Contains(r.stdout, "reaped") {
			t.Fatalf("reap: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
}

func TestKeysTwoOperatorsSettleOneKeyTwoWays(t *testing.T) {
	eachStore(t, func(t *testing.T, s keysStore) {
		s.stuck(t, "transfer-9")
		v := showJSON(t, s, "transfer-9").Version
		var results [2]result
		var wg sync.WaitGroup
		for i, outcome := range []string{"--applied", "--not-applied"} {
			wg.Go(func() {
				results[i] = s.run(t, "settle", "--key", "transfer-9", "--expect", "uncertain", "--version", v, outcome)
			})
		}
		wg.Wait()
		if results[0].code+results[1].code != 1 {
			t.Fatalf("two settles at one version: exits %d and %d, want one 0 and one 1 (%+v)", results[0].code, results[1].code, results)
		}
		loser, found := results[1], "completed"
		if results[0].code == 1 {
			loser, found = results[0], "free"
		}
		if !strings.Contains(loser.stdout, found) || !strings.Contains(loser.stderr, "refused") {
			t.Fatalf("the refused settle: stdout %q stderr %q; want the key found %s", loser.stdout, loser.stderr, found)
		}
	})
}

func TestKeysUsage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	dsn := "file:" + path
	for _, args := range [][]string{
		{"keys"},
		{"keys", "frob", "--sql", dsn, "--driver", "sqlite"},
		{"keys", "list"},
		{"keys", "list", "--sql", dsn},
		{"keys", "list", "--sql", dsn, "--driver", "sqlite", "--redis", "127.0.0.1:1"},
		{"keys", "list", "--sql", dsn, "--driver", "sqlite", "--state", "free"},
		{"keys", "show", "--sql", dsn, "--driver", "sqlite"},
		{"keys", "settle", "--sql", dsn, "--driver", "sqlite", "--key", "k", "--applied"},
		{"keys", "settle", "--sql", dsn, "--driver", "sqlite", "--key", "k", "--expect", "completed", "--applied"},
		{"keys", "settle", "--sql", dsn, "--driver", "sqlite", "--expect", "uncertain", "--applied"},
		{"keys", "settle", "--sql", dsn, "--driver", "sqlite", "--key", "k", "--expect", "uncertain"},
		{"keys", "settle", "--sql", dsn, "--driver", "sqlite", "--key", "k", "--expect", "uncertain", "--not-applied", "--status", "200"},
		{"keys", "reap", "--sql", dsn, "--driver", "sqlite", "--limit", "0"},
	} {
		if r := runWith("", args...); r.code != 2 || r.stderr == "" {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message", args, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatalf("a usage error opened the database")
	}
	if r := runWith("", "keys", "-h"); r.code != 0 || !strings.Contains(r.stdout, "Usage: retryfuse keys") {
		t.Fatalf("keys -h: exit %d", r.code)
	}
}
