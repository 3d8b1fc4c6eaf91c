package retryfusesql

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/require"
)

// The server half of Idempotency-Key (package idempotency) on the SQL
// ledger, over real loopback servers.

// charges is a handler that counts its runs and answers 201.
type charges struct{ runs atomic.Int64 }

func (c *charges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("X-Run", string(rune('0'+n)))
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "created "+string(body))
}

func middlewareServer(t *testing.T, l ledger.Ledger, next http.Handler) *httptest.Server {
	t.Helper()
	h, err := idempotency.New(next, idempotency.Config{Ledger: l, ErrorLog: log.New(io.Discard, "", 0)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type result struct {
	status   int
	replayed string
	run      string
	body     string
}

func postKeyed(t *testing.T, srv *httptest.Server, key, body string) result {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(c, http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), resp.Header.Get("X-Run"), string(b)}
}

func TestMiddlewareRunsAKeyOnceAcrossServers(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		h := &charges{}
		one := middlewareServer(t, b.newLedger(t, LedgerConfig{}), h)
		two := middlewareServer(t, b.newLedger(t, LedgerConfig{}), h)
		first := postKeyed(t, one, "k1", "10 EUR")
		require.Equal(t, result{201, "", "1", "created 10 EUR"}, first)
		require.Equal(t, result{201, "true", "1", "created 10 EUR"}, postKeyed(t, two, "k1", "10 EUR"), "the other server replays")
		require.Equal(t, result{201, "true", "1", "created 10 EUR"}, postKeyed(t, one, "k1", "10 EUR"))
		require.Equal(t, int64(1), h.runs.Load())
		require.Equal(t, http.StatusUnprocessableEntity, postKeyed(t, two, "k1", "20 EUR").status)
	})
}

func TestMiddlewareAnswers503WhenTheDatabaseIsDown(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		h := &charges{}
		db := b.open(t)
		srv := middlewareServer(t, b.ledgerOn(t, db, LedgerConfig{}), h)
		require.NoError(t, db.Close())
		got := postKeyed(t, srv, "k1", "x")
		require.Equal(t, http.StatusServiceUnavailable, got.status)
		require.Contains(t, got.body, idempotency.ProblemLedgerUnavailable)
		require.Equal(t, int64(0), h.runs.Load(), "the handler ran without a claim")
	})
}
