package retryfusesql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

// Every ledger test runs on SQLite (a file in the test's temporary
// directory) and on PostgreSQL when PG_DSN names a database
// (scripts/sql-test starts one). Without PG_DSN the PostgreSQL runs fail
// under CI=true and are skipped otherwise.

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild()) // a server process of a crash test (tx_crash_test.go)
	}
	if os.Getenv(serveChildEnv) != "" {
		os.Exit(serveChild()) // a server process of a test with two (tx_processes_test.go)
	}
	goleak.VerifyTestMain(m)
}

// backend is one database a test runs on.
type backend struct {
	name    string
	dialect Dialect
	table   string // the test's own table
	driver  string
	dsn     string
	// open returns a new handle (a pool of its own, as another process
	// would have) on the test's database, closed when the test ends.
	open func(t testing.TB) *sql.DB
}

// eachBackend runs f as a subtest on SQLite and on PostgreSQL.
func eachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { f(t, sqliteBackend(t)) })
	t.Run("postgres", func(t *testing.T) { f(t, postgresBackend(t)) })
}

// sqliteDSN is the DSN of a SQLite database in path: writers wait for
// one another (busy_timeout), readers do not wait for writers (WAL), and
// a transaction takes the write lock when it begins (BEGIN IMMEDIATE).
func sqliteDSN(path string) string {
	path = strings.NewReplacer("%", "%25", "#", "%23", "?", "%3F").Replace(path) // a URI: t.TempDir holds # for a repeated subtest
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}

func sqliteBackend(t *testing.T) *backend {
	dsn := sqliteDSN(filepath.Join(t.TempDir(), "ledger.db"))
	return &backend{name: "sqlite", dialect: SQLite, table: DefaultTable, driver: "sqlite", dsn: dsn, open: func(t testing.TB) *sql.DB {
		return openDB(t, "sqlite", dsn)
	}}
}

func postgresBackend(t *testing.T) *backend {
	dsn := os.Getenv("PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("PG_DSN is empty (CI=true: the PostgreSQL tests must run; use scripts/sql-test)")
		}
		t.Skip("PG_DSN is empty; run scripts/sql-test to run the PostgreSQL tests")
	}
	b := &backend{name: "postgres", dialect: Postgres, table: uniqTable(t), driver: "pgx", dsn: dsn, open: func(t testing.TB) *sql.DB {
		return openDB(t, "pgx", dsn)
	}}
	admin := b.open(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(ctx, "DROP TABLE IF EXISTS "+b.table+", "+b.table+"_schema")
	})
	return b
}

func openDB(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// uniqTable returns a table name of the test's own.
func uniqTable(t testing.TB) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "rf_" + hex.EncodeToString(b)
}

// newLedger returns a Ledger on a new handle of b's database, with cfg's
// Dialect and Table set to b's.
func (b *backend) newLedger(t testing.TB, cfg LedgerConfig) *Ledger {
	t.Helper()
	return b.ledgerOn(t, b.open(t), cfg)
}

func (b *backend) ledgerOn(t testing.TB, db *sql.DB, cfg LedgerConfig) *Ledger {
	t.Helper()
	cfg.Dialect, cfg.Table = b.dialect, b.table
	l, err := NewLedger(ctx(t), db, cfg)
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	return l
}

// ctx returns a context that ends with the test, bounded to a minute.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// fakeClock is the tests' clock: it moves only when told.
type fakeClock struct{ ms atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ms.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	return c
}

func (c *fakeClock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

func begin(t testing.TB, l *Ledger, key string, fp ledger.Fingerprint) ledger.Claim {
	t.Helper()
	cl, err := l.Begin(ctx(t), key, fp)
	if err != nil {
		t.Fatalf("Begin(%q): %v", key, err)
	}
	return cl
}

func wantState(t testing.TB, cl ledger.Claim, state decide.KeyState, uncertain bool) {
	t.Helper()
	if cl.State != state || cl.Uncertain != uncertain {
		t.Fatalf("claim: got state %v uncertain %v, want %v uncertain %v", cl.State, cl.Uncertain, state, uncertain)
	}
}

var fpA, fpB = ledger.Fingerprint{1}, ledger.Fingerprint{2}
