package retryfuseredis

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
)

// One principal's key is never another's, on the Redis ledger: two
// servers behind the middleware sharing one Redis, and a client fleet's
// Ledger in Redis.

type principalAnswer struct {
	status   int
	replayed string
	cookies  int
	body     string
}

func postAs(t *testing.T, srv *httptest.Server, auth, key, body string) principalAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/refunds", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", auth)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return principalAnswer{resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), len(resp.Cookies()), string(b)}
}

func TestMiddlewareNeverGivesAnotherPrincipalTheStoredResponse(t *testing.T) {
	prefix := uniq(t)
	var runs atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret-of-A"})
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "refund for A: "+string(body))
	})
	one := middlewareServer(t, middlewareLedger(t, newClient(t, sharedAddr(t)), prefix), next)
	two := middlewareServer(t, middlewareLedger(t, newClient(t, sharedAddr(t)), prefix), next)

	if got, want := postAs(t, one, "Bearer token-of-A", "order-123-refund", "100 EUR"), (principalAnswer{201, "", 1, "refund for A: 100 EUR"}); got != want {
		t.Fatalf("A: got %+v, want %+v", got, want)
	}
	for _, srv := range []*httptest.Server{one, two} {
		for _, auth := range []string{"Bearer token-of-B", "Bearer token-of-A-refreshed"} {
			got := postAs(t, srv, auth, "order-123-refund", "100 EUR")
			if got.status != http.StatusUnprocessableEntity || got.replayed != "" || got.cookies != 0 ||
				strings.Contains(got.body, "refund for A") || problemType(got.body) != idempotency.ProblemKeyReused {
				t.Errorf("%s: got %+v, want the 422 of a key reused, with nothing of A's response", auth, got)
			}
		}
	}
	if got, want := postAs(t, two, "Bearer token-of-A", "order-123-refund", "100 EUR"), (principalAnswer{201, "true", 0, "refund for A: 100 EUR"}); got != want {
		t.Errorf("A's repeat on the other server: got %+v, want %+v (the stored response, without the cookie)", got, want)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// A fleet of clients sharing one Redis Ledger calls a payments API for
// its merchants: merchant B's call under merchant A's key is refused
// before sending; A's repeat from another process is answered.
func TestClientLedgerNeverAnswersAnotherPrincipal(t *testing.T) {
	prefix := uniq(t)
	var posts atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "refund for "+r.Header.Get("Authorization"))
	}))
	t.Cleanup(api.Close)
	client := func() *http.Client {
		tr := &retryfuse.Transport{Keys: retryfuse.KeyPolicy{Ledger: middlewareLedger(t, newClient(t, sharedAddr(t)), prefix)}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	one, two := client(), client()
	send := func(c *http.Client, auth string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/refunds", strings.NewReader("100 EUR"))
		if err != nil {
			t.Fatal(err)
		}
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
	if got, err := send(one, "Bearer A"); err != nil || got != "refund for Bearer A" {
		t.Fatalf("A: %q, %v", got, err)
	}
	var kc *retryfuse.KeyConflictError
	if _, err := send(two, "Bearer B"); !errors.As(err, &kc) || !kc.Credentials {
		t.Errorf("B: got %v, want a *KeyConflictError over credentials", err)
	}
	if got, err := send(two, "Bearer A"); err != nil || got != "refund for Bearer A" {
		t.Errorf("A's repeat from the other process: %q, %v; want its stored response", got, err)
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("%d POSTs reached the API, want 1", n)
	}
}
