package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/retryfuse/retryfuse/ledger"
	retryfusesql "github.com/retryfuse/retryfuse/sql"
	_ "modernc.org/sqlite" // the demo's database: SQLite in a file of its own, pure Go
)

// crashResults: a handler that writes its charge and dies before its
// response is recorded, behind the middleware with its key in a ledger of
// its own, and behind the transactional middleware, where key, charge and
// response commit together.
type crashResults struct {
	Own, Tx crashSide
}

// crashSide is what one side measured.
type crashSide struct {
	Applied   int    // charges in the database at the end
	Runs      int    // times the handler ran
	Outcome   string // what the caller got
	Attempts  int    // the attempts of retryfuse's call
	KeyStuck  bool   // a later call under the key still gets a reconcile error
	FirstLost bool   // the first run's charge was rolled back with it
}

// runCrash sends one keyed charge through retryfuse (Keys.ServerHonours,
// confirmed by a first keyed call) to each server. The handler writes the
// charge, then, on its first run, panics before it returns: a server that
// died between the effect and the record.
func runCrash(srv *servers) (crashResults, error) {
	var res crashResults
	dir, err := os.MkdirTemp("", "retryfuse-demo")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return res, err
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE charges (side TEXT, key TEXT)"); err != nil {
		return res, err
	}
	sqlLedger, err := retryfusesql.NewLedger(ctx, db, retryfusesql.LedgerConfig{Dialect: retryfusesql.SQLite})
	if err != nil {
		return res, err
	}
	if res.Own, err = crashSideRun(srv, db, "own", &ledger.Memory{}); err != nil {
		return res, err
	}
	if res.Tx, err = crashSideRun(srv, db, "tx", sqlLedger.Transactional()); err != nil {
		return res, err
	}
	return res, nil
}

// crashSideRun runs one side: the middleware on ledger l, a handler that
// charges through the request's transaction when there is one (else
// straight into the database) and panics on its first run.
func crashSideRun(srv *servers, db *sql.DB, side string, l ledger.Ledger) (crashSide, error) {
	var out crashSide
	var runs atomic.Int32
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/sessions" {
			w.WriteHeader(http.StatusCreated)
			return
		}
		n := runs.Add(1)
		var exec interface {
			ExecContext(context.Context, string, ...any) (sql.Result, error)
		} = db
		if tx := idempotency.Tx(r.Context()); tx != nil {
			exec = tx
		}
		if _, err := exec.ExecContext(r.Context(), "INSERT INTO charges (side, key) VALUES (?, ?)", side, r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, "could not charge", http.StatusInternalServerError)
			return
		}
		if n == 1 {
			panic(http.ErrAbortHandler) // the process dies here: charged, nothing recorded
		}
		w.WriteHeader(http.StatusCreated)
	})
	mw, err := idempotency.New(charge, idempotency.Config{Ledger: l, ErrorLog: log.New(io.Discard, "", 0)})
	if err != nil {
		return out, err
	}
	s, err := srv.start("crash ("+side+")", mw)
	if err != nil {
		return out, err
	}
	tr := srv.newFuse(lostAttemptTimeout)
	tr.Keys.ServerHonours = true
	var attempts atomic.Int32
	tr.Hooks.AttemptDone = func(retryfuse.AttemptDoneInfo) { attempts.Add(1) }
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	session, err := poster(s.URL+"/sessions", "session-"+side)(context.Background())
	if err != nil {
		return out, err
	}
	resp, err := client.Do(session) // its marker confirms that the server honours keys
	drainClose(resp)
	if err != nil {
		return out, err
	}
	attempts.Store(0)
	key := "order-3001-" + side
	req, err := poster(s.URL+"/charges", key)(context.Background())
	if err != nil {
		return out, err
	}
	resp, err = client.Do(req)
	out.Outcome = describe(resp, err)
	drainClose(resp)
	out.Attempts = int(attempts.Load())

	// A later call under the key, from a client that knows nothing of
	// this one: is the key settled, or left for someone to reconcile?
	later := srv.newFuse(lostAttemptTimeout)
	defer later.CloseIdleConnections()
	again, err := poster(s.URL+"/charges", key)(context.Background())
	if err != nil {
		return out, err
	}
	resp, err = (&http.Client{Transport: later}).Do(again)
	var rec *retryfuse.ReconcileRequiredError
	out.KeyStuck = errors.As(err, &rec)
	drainClose(resp)

	if err := db.QueryRow("SELECT COUNT(*) FROM charges WHERE side = ?", side).Scan(&out.Applied); err != nil {
		return out, fmt.Errorf("counting the charges: %w", err)
	}
	out.Runs = int(runs.Load())
	out.FirstLost = out.Runs == 2 && out.Applied == 1
	return out, nil
}
