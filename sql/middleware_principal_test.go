package retryfusesql

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/require"
)

// One principal's key is never another's, on the SQL ledger: two servers
// behind the middleware sharing one database, in the ordinary and the
// transactional mode, and a client's Ledger shared by a fleet.

// sessionCharges counts its runs and answers 201 with a body and a
// session cookie of the caller's own.
type sessionCharges struct{ runs atomic.Int64 }

func (c *sessionCharges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret-of-A"})
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "refund for A: "+string(body))
}

type principalResult struct {
	status   int
	replayed string
	cookies  int
	body     string
}

func postAs(t *testing.T, srv *httptest.Server, auth, key, body string) principalResult {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(c, http.MethodPost, srv.URL+"/refunds", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", auth)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return principalResult{resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), len(resp.Cookies()), string(b)}
}

func TestMiddlewareNeverGivesAnotherPrincipalTheStoredResponse(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, mode := range []struct {
			name string
			of   func(*Ledger) ledger.Ledger
		}{
			{"ordinary", func(l *Ledger) ledger.Ledger { return l }},
			{"transactional", func(l *Ledger) ledger.Ledger { return l.Transactional() }},
		} {
			t.Run(mode.name, func(t *testing.T) {
				h := &sessionCharges{}
				one := middlewareServer(t, mode.of(b.newLedger(t, LedgerConfig{})), h)
				two := middlewareServer(t, mode.of(b.newLedger(t, LedgerConfig{})), h)
				key := "order-123-refund-" + mode.name

				a := postAs(t, one, "Bearer token-of-A", key, "100 EUR")
				require.Equal(t, principalResult{201, "", 1, "refund for A: 100 EUR"}, a)
				for _, srv := range []*httptest.Server{one, two} {
					for _, auth := range []string{"Bearer token-of-B", "Bearer token-of-A-refreshed"} {
						got := postAs(t, srv, auth, key, "100 EUR")
						require.Equal(t, http.StatusUnprocessableEntity, got.status, "%s: %+v", auth, got)
						require.Empty(t, got.replayed, auth)
						require.Zero(t, got.cookies, "%s was sent a cookie", auth)
						require.NotContains(t, got.body, "refund for A", auth)
						require.Contains(t, got.body, idempotency.ProblemKeyReused, auth)
					}
				}
				require.Equal(t, principalResult{201, "true", 0, "refund for A: 100 EUR"}, postAs(t, two, "Bearer token-of-A", key, "100 EUR"),
					"A's repeat on the other server: the stored response, without the cookie")
				require.Equal(t, int64(1), h.runs.Load(), "runs of the handler")
			})
		}
	})
}

// A fleet of clients sharing one SQL Ledger calls a payments API for its
// merchants: merchant B's call under merchant A's key is refused before
// sending, never answered with A's response; A's repeat is.
func TestClientLedgerNeverAnswersAnotherPrincipal(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var posts atomic.Int64
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			posts.Add(1)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "refund for "+r.Header.Get("Authorization"))
		}))
		t.Cleanup(api.Close)
		client := func() *http.Client {
			tr := &retryfuse.Transport{Keys: retryfuse.KeyPolicy{Ledger: b.newLedger(t, LedgerConfig{})}}
			t.Cleanup(tr.CloseIdleConnections)
			return &http.Client{Transport: tr}
		}
		one, two := client(), client()
		send := func(c *http.Client, auth string) (string, error) {
			req, err := http.NewRequestWithContext(ctx(t), http.MethodPost, api.URL+"/refunds", strings.NewReader("100 EUR"))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", "order-123-refund")
			req.Header.Set("Authorization", auth)
			resp, err := c.Do(req)
			if err != nil {
				return "", err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			return string(body), err
		}
		got, err := send(one, "Bearer A")
		require.NoError(t, err)
		require.Equal(t, "refund for Bearer A", got)
		_, err = send(two, "Bearer B")
		var kc *retryfuse.KeyConflictError
		require.True(t, errors.As(err, &kc), "B: got %v, want a *KeyConflictError", err)
		require.True(t, kc.Credentials)
		got, err = send(two, "Bearer A")
		require.NoError(t, err)
		require.Equal(t, "refund for Bearer A", got, "A's repeat from the other process: its stored response")
		require.Equal(t, int64(1), posts.Load(), "POSTs that reached the API")
	})
}
