package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/retryfuse/retryfuse/idempotency"
	retryfusesql "github.com/retryfuse/retryfuse/sql"
)

// serve is a server process: the transactional middleware on the
// ledger's table, in front of a handler that writes its effect (one row
// of the effects table) in the request's transaction. It prints the
// address it listens on, and serves until it is killed.
func serve(dsn, table string) int {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashonce -serve:", err)
		return 1
	}
	db.SetMaxOpenConns(16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := retryfusesql.NewLedger(ctx, db, retryfusesql.LedgerConfig{Dialect: retryfusesql.Postgres, Table: table, InFlightTTL: 30 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashonce -serve:", err)
		return 1
	}
	insert := "INSERT INTO " + table + "_effects (idem, pid) VALUES ($1, $2)"
	pid := os.Getpid()
	effect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		tx := idempotency.Tx(r.Context())
		if _, err := tx.ExecContext(r.Context(), insert, r.Header.Get("Idempotency-Key"), pid); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// Widen the window between the effect and the commit, where a kill
		// must leave nothing.
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		w.Header().Set("X-Pid", strconv.Itoa(pid))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"applied":true}`)
	})
	h, err := idempotency.New(effect, idempotency.Config{Ledger: l.Transactional(), ErrorLog: log.New(io.Discard, "", 0)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashonce -serve:", err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashonce -serve:", err)
		return 1
	}
	fmt.Println(ln.Addr().String())
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "crashonce -serve:", err)
		return 1
	}
	return 0
}
