package retryfusesql

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/stretchr/testify/require"
)

// Two server processes on one database: the test binary runs again as
// each (serveChild), behind the transactional middleware, until its
// standard input ends.

const serveChildEnv = "RETRYFUSESQL_SERVE_CHILD"

// serveChild is a server process: it listens on 127.0.0.1, writes
// "listening ADDR", and serves keyed charges in the request's transaction
// until its standard input ends. It returns its exit code.
func serveChild() int {
	env := func(k string) string { return os.Getenv("RETRYFUSESQL_" + k) }
	db, err := sql.Open(env("DRIVER"), env("DSN"))
	if err != nil {
		return 2
	}
	defer db.Close()
	d := SQLite
	if env("DRIVER") == "pgx" {
		d = Postgres
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	l, err := NewLedger(ctx, db, LedgerConfig{Dialect: d, Table: env("TABLE")})
	cancel()
	if err != nil {
		return 3
	}
	h, err := idempotency.New(&effects{table: env("TABLE") + "_effects"}, idempotency.Config{Ledger: l.Transactional(), ErrorLog: log.New(io.Discard, "", 0)})
	if err != nil {
		return 4
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 5
	}
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	fmt.Println("listening", ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	return 0
}

// startServeChild starts a server process on b's database and returns
// its URL; it is stopped when the test ends.
func startServeChild(t *testing.T, b *backend) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveChildEnv+"=1", "RETRYFUSESQL_DRIVER="+b.driver, "RETRYFUSESQL_DSN="+b.dsn, "RETRYFUSESQL_TABLE="+b.table)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the server process did not say where it listens")
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	require.True(t, ok, "the server process said %q", line)
	return "http://" + addr
}

// 100 concurrent requests under one key, spread over two server
// processes on one database: the handler commits once; every other
// request gets the stored response or 409 in flight.
func TestTxTwoProcessesCommitOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		db := b.open(t)
		_ = b.ledgerOn(t, db, LedgerConfig{}) // the schema, before the servers race to make it
		servers := []string{startServeChild(t, b), startServeChild(t, b)}
		const n = 100
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
		defer client.CloseIdleConnections()
		statuses := postConcurrently(t, client, servers, "k1", n)
		c := ctx(t)
		require.Equal(t, int64(1), e.count(t, db, "k1"), "effects committed (statuses %v)", statuses)
		require.Equal(t, 1, statuses["Created "], "first responses (statuses %v)", statuses)
		require.Equal(t, n, statuses["Created "]+statuses["Created true"]+statuses["Conflict "], "statuses %v", statuses)
		for _, url := range servers {
			got, err := postTo(c, client, url, "k1", "x")
			require.NoError(t, err)
			require.Equal(t, 201, got.status)
			require.Equal(t, "true", got.replayed, "after the commit, each process replays the stored response")
		}
	})
}
