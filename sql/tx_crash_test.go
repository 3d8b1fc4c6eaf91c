package retryfusesql

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/stretchr/testify/require"
)

// A server killed between the handler's effect and the commit: the test
// binary runs again as the server (crashChild), which writes the effect
// in the request's transaction and kills itself (SIGKILL) before the
// middleware commits.

const crashChildEnv = "RETRYFUSESQL_CRASH_CHILD"

// crashChild is the server process: it serves one keyed request behind
// the transactional middleware, and its handler kills the process once
// its effect is written. It returns only when something failed.
func crashChild() int {
	env := func(k string) string { return os.Getenv("RETRYFUSESQL_" + k) }
	db, err := sql.Open(env("DRIVER"), env("DSN"))
	if err != nil {
		return 2
	}
	d := SQLite
	if env("DRIVER") == "pgx" {
		d = Postgres
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := NewLedger(ctx, db, LedgerConfig{Dialect: d, Table: env("TABLE")})
	if err != nil {
		return 3
	}
	e := &effects{table: env("TABLE") + "_effects", after: func(http.ResponseWriter, *http.Request, int64) bool {
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill() // the crash: after the effect, before the commit
		select {}
	}}
	h, err := idempotency.New(e, idempotency.Config{Ledger: l.Transactional()})
	if err != nil {
		return 4
	}
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("x"))
	r.Header.Set("Idempotency-Key", env("KEY"))
	h.ServeHTTP(httptest.NewRecorder(), r)
	return 5 // the handler returned: it did not crash
}

func TestTxServerKilledBeforeCommitLeavesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		db := b.open(t)
		l := b.ledgerOn(t, db, LedgerConfig{})

		c, cancel := context.WithTimeout(ctx(t), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(c, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"=1", "RETRYFUSESQL_DRIVER="+b.driver, "RETRYFUSESQL_DSN="+b.dsn,
			"RETRYFUSESQL_TABLE="+b.table, "RETRYFUSESQL_KEY=k1")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "the server process: %v (%s)", err, out)
		require.False(t, exit.Exited(), "the server process exited with %d rather than being killed (%s)", exit.ExitCode(), out)

		require.Equal(t, int64(0), e.count(t, db, "k1"), "the effect of the killed server was committed")
		require.Equal(t, int64(0), countRows(t, l), "the killed server's claim was committed")
		srv := txServer(t, l.Transactional(), e, idempotency.Config{})
		require.Equal(t, result{201, "", "1", "created"}, postKeyed(t, srv, "k1", "x"), "the retry runs once")
		require.Equal(t, result{201, "true", "1", "created"}, postKeyed(t, srv, "k1", "x"))
		require.Equal(t, int64(1), e.count(t, db, "k1"))
	})
}

func TestTxConnectionLostBeforeCommitLeavesNothing(t *testing.T) {
	b := postgresBackend(t) // SQLite has no connection to lose
	e := newEffects(t, b)
	e.after = func(w http.ResponseWriter, r *http.Request, run int64) bool {
		if run == 1 { // the database ends the connection: the transaction dies with it
			_, _ = idempotency.Tx(r.Context()).ExecContext(r.Context(), "SELECT pg_terminate_backend(pg_backend_pid())")
		}
		return false
	}
	db := b.open(t)
	srv := txServer(t, b.ledgerOn(t, db, LedgerConfig{}).Transactional(), e, idempotency.Config{})
	got := postKeyed(t, srv, "k1", "x")
	require.Equal(t, http.StatusServiceUnavailable, got.status, "a transaction that could not commit is reported a success")
	require.Equal(t, int64(0), e.count(t, db, "k1"))
	require.Equal(t, result{201, "", "2", "created"}, postKeyed(t, srv, "k1", "x"))
	require.Equal(t, int64(1), e.count(t, db, "k1"))
}
