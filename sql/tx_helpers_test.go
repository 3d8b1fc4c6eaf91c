package retryfusesql

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/require"
)

// effects is a handler of the transactional mode: it writes one row of
// its effects table in the request's transaction and answers 201. Its
// hooks, when set, run after the effect is written, in the handler.
type effects struct {
	table string
	runs  atomic.Int64
	// after runs after the effect is written, with the run's number; it
	// may panic, block, or answer the request itself (true).
	after func(w http.ResponseWriter, r *http.Request, run int64) bool
}

func newEffects(t *testing.T, b *backend) *effects {
	t.Helper()
	e := &effects{table: b.table + "_effects"}
	db := b.open(t)
	_, err := db.ExecContext(ctx(t), "CREATE TABLE "+e.table+" (idem TEXT NOT NULL, run INTEGER NOT NULL)")
	require.NoError(t, err)
	if b.dialect == Postgres {
		t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+e.table) })
	}
	return e
}

func (e *effects) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	run := e.runs.Add(1)
	tx := idempotency.Tx(r.Context())
	if tx == nil {
		http.Error(w, "no transaction", http.StatusInternalServerError)
		return
	}
	if _, err := tx.ExecContext(r.Context(), "INSERT INTO "+e.table+" (idem, run) VALUES ('"+r.Header.Get("Idempotency-Key")+"', "+itoa(run)+")"); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if e.after != nil && e.after(w, r, run) {
		return
	}
	w.Header().Set("X-Run", itoa(run))
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "created")
}

// count returns the number of effects under key, read on db.
func (e *effects) count(t testing.TB, db *sql.DB, key string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM "+e.table+" WHERE idem = '"+key+"'").Scan(&n))
	return n
}

func itoa(n int64) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

// txServer starts a server of next behind the middleware in the
// transactional mode on l, its panics and errors kept quiet.
func txServer(t *testing.T, l ledger.Ledger, next http.Handler, cfg idempotency.Config) *httptest.Server {
	t.Helper()
	cfg.Ledger = l
	cfg.ErrorLog = log.New(io.Discard, "", 0)
	h, err := idempotency.New(next, cfg)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// tryPost is postKeyed that returns the client's error rather than
// failing on it (a handler that panicked sends no response).
func tryPost(t *testing.T, srv *httptest.Server, key, body string) (result, error) {
	return postTo(ctx(t), srv.Client(), srv.URL, key, body)
}

// postTo sends a keyed POST to the server at url with client; it may be
// called from any goroutine.
func postTo(c context.Context, client *http.Client, url, key, body string) (result, error) {
	req, err := http.NewRequestWithContext(c, http.MethodPost, url+"/charges", strings.NewReader(body))
	if err != nil {
		return result{}, err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), resp.Header.Get("X-Run"), string(b)}, err
}

// lostAck is a TxLedger whose commits take effect but report an error,
// as when the database's acknowledgement of a commit is lost.
type lostAck struct {
	TxLedger
	lost atomic.Bool // the next commit's acknowledgement is lost
}

var errAckLost = errors.New("connection reset while reading the commit's answer")

func (l *lostAck) BeginTx(ctx context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, idempotency.ClaimTx, error) {
	cl, c, err := l.TxLedger.BeginTx(ctx, key, fp)
	if c != nil {
		c = &lostAckClaim{c, l}
	}
	return cl, c, err
}

type lostAckClaim struct {
	idempotency.ClaimTx
	l *lostAck
}

func (c *lostAckClaim) Commit(ctx context.Context, res *ledger.StoredResponse) error {
	err := c.ClaimTx.Commit(ctx, res)
	if err == nil && c.l.lost.CompareAndSwap(true, false) {
		return errAckLost
	}
	return err
}
