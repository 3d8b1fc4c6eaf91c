package idempotency

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

// The transactional mode against a TxLedger of the tests: a ledger.Memory
// for the keys and a database/sql driver that only counts commits and
// rollbacks. The SQL ledger's own tests (module sql) run it on
// PostgreSQL and SQLite.

type countingDriver struct{ commits, rollbacks atomic.Int64 }

func (d *countingDriver) Open(string) (driver.Conn, error) { return &countingConn{d}, nil }

type countingConn struct{ d *countingDriver }

func (c *countingConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("no statements") }
func (c *countingConn) Close() error                        { return nil }
func (c *countingConn) Begin() (driver.Tx, error)           { return countingTx{c.d}, nil }

type countingTx struct{ d *countingDriver }

func (t countingTx) Commit() error   { t.d.commits.Add(1); return nil }
func (t countingTx) Rollback() error { t.d.rollbacks.Add(1); return nil }

// countingConnector opens the counting driver's connections.
type countingConnector struct{ d *countingDriver }

func (c countingConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open("") }
func (c countingConnector) Driver() driver.Driver                        { return c.d }

// txLedger is a TxLedger on a ledger.Memory and the counting driver.
type txLedger struct {
	*ledger.Memory
	db       *sql.DB
	drv      *countingDriver
	onCommit func() // called before each commit
	failNext atomic.Bool
}

func newTxLedger(t *testing.T) *txLedger {
	t.Helper()
	drv := &countingDriver{}
	// A connector rather than a registered name: a name registers once per
	// process, and -count runs each test again.
	db := sql.OpenDB(countingConnector{drv})
	t.Cleanup(func() { db.Close() })
	return &txLedger{Memory: &ledger.Memory{}, db: db, drv: drv}
}

func (l *txLedger) BeginTx(ctx context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, ClaimTx, error) {
	cl, err := l.Begin(ctx, key, fp)
	if err != nil || cl.State != decide.KeyNone {
		return cl, nil, err
	}
	tx, err := l.db.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return cl, nil, err
	}
	return cl, &txClaim{l, tx, key, cl.Token}, nil
}

type txClaim struct {
	l          *txLedger
	tx         *sql.Tx
	key, token string
}

func (c *txClaim) Tx() *sql.Tx { return c.tx }

func (c *txClaim) Commit(ctx context.Context, res *ledger.StoredResponse) error {
	if c.l.onCommit != nil {
		c.l.onCommit()
	}
	if c.l.failNext.CompareAndSwap(true, false) {
		_ = c.tx.Rollback()
		_ = c.l.Release(ctx, c.key, c.token)
		return errors.New("commit failed")
	}
	if err := c.l.Complete(ctx, c.key, c.token, res); err != nil {
		return err
	}
	return c.tx.Commit()
}

func (c *txClaim) Rollback() error {
	_ = c.l.Release(context.Background(), c.key, c.token)
	return c.tx.Rollback()
}

func TestTxResponseIsSentOnlyAfterTheCommit(t *testing.T) {
	l := newTxLedger(t)
	w := httptest.NewRecorder()
	var flushErr error
	var sawTx bool
	l.onCommit = func() {
		if w.Code != http.StatusOK || w.Body.Len() != 0 || w.Flushed || len(w.Header()) > 1 {
			t.Errorf("at the commit the client had been sent: %d %q flushed %v header %v", w.Code, w.Body, w.Flushed, w.Header())
		}
	}
	h, _ := newHandler(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		sawTx = Tx(r.Context()) != nil
		rw.Header().Set("Location", "/charges/1")
		rw.WriteHeader(http.StatusCreated)
		rw.Write([]byte("created"))
		flushErr = http.NewResponseController(rw).Flush()
	}), Config{Ledger: l})
	h.ServeHTTP(w, post("/charges", "k", "x"))
	if w.Code != http.StatusCreated || w.Body.String() != "created" || w.Header().Get("Location") != "/charges/1" || w.Header().Get(HeaderHonoured) != "?1" {
		t.Errorf("after the commit: %d %q %v; want 201 created, its Location and %s", w.Code, w.Body, w.Header(), HeaderHonoured)
	}
	if !sawTx {
		t.Error("the handler saw no transaction")
	}
	if !errors.Is(flushErr, http.ErrNotSupported) {
		t.Errorf("Flush in the transactional mode: %v, want http.ErrNotSupported", flushErr)
	}
	if c, r := l.drv.commits.Load(), l.drv.rollbacks.Load(); c != 1 || r != 0 {
		t.Errorf("%d commits, %d rollbacks; want 1, 0", c, r)
	}
	if again := serve(h, post("/charges", "k", "x")); again.Header().Get(HeaderReplayed) != "true" || again.Code != http.StatusCreated {
		t.Errorf("repeat: %d replayed %q; want the stored 201", again.Code, again.Header().Get(HeaderReplayed))
	}
}

func TestTxPanicRollsBackAndFreesTheKey(t *testing.T) {
	l := newTxLedger(t)
	runs := 0
	h, _ := newHandler(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		runs++
		if runs == 1 {
			rw.WriteHeader(http.StatusCreated)
			panic("after the effect")
		}
		rw.WriteHeader(http.StatusCreated)
	}), Config{Ledger: l})
	w := httptest.NewRecorder()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not go on")
			}
		}()
		h.ServeHTTP(w, post("/charges", "k", "x"))
	}()
	if w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Errorf("a handler that panicked sent %d %q", w.Code, w.Body)
	}
	if c, r := l.drv.commits.Load(), l.drv.rollbacks.Load(); c != 0 || r != 1 {
		t.Errorf("%d commits, %d rollbacks; want 0, 1", c, r)
	}
	if again := serve(h, post("/charges", "k", "x")); again.Code != http.StatusCreated || runs != 2 {
		t.Errorf("retry: %d after %d runs; want 201 after 2 (the key free)", again.Code, runs)
	}
}

func TestTxFailedCommitIsAnswered503WithoutTheResponse(t *testing.T) {
	l := newTxLedger(t)
	l.failNext.Store(true)
	h, _ := newHandler(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("X-Effect", "1")
		rw.WriteHeader(http.StatusCreated)
	}), Config{Ledger: l})
	w := serve(h, post("/charges", "k", "x"))
	problemOf(t, w, ProblemLedgerUnavailable, http.StatusServiceUnavailable)
	if w.Header().Get("X-Effect") != "" || w.Header().Get("Retry-After") == "" {
		t.Errorf("header %v: want the handler's withheld and a Retry-After", w.Header())
	}
}

func TestTxIsNilOutsideTheTransactionalMode(t *testing.T) {
	var tx *sql.Tx = &sql.Tx{}
	h, _ := newHandler(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		tx = Tx(r.Context())
	}), Config{})
	serve(h, post("/charges", "k", "x"))
	if tx != nil {
		t.Errorf("Tx in the ordinary mode: %v, want nil", tx)
	}
	if Tx(context.Background()) != nil {
		t.Error("Tx of a context without a transaction is not nil")
	}
}
