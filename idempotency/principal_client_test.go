package idempotency

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse"
)

// A token refreshed between a write and its repeat, through retryfuse's
// client toward the middleware: the handler runs once, and the caller is
// told that the server refused the key, never that the write succeeded
// twice or not at all.
func TestRotatedTokenThroughTheClientRunsTheHandlerOnce(t *testing.T) {
	next := &counter{}
	srv := newAnswering(t, next, Config{})
	rt := newClient(t, &retryfuse.Transport{Keys: retryfuse.KeyPolicy{ServerHonours: true}})
	send := func(token string) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wireTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/refunds", strings.NewReader(`{"amount":100}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "order-123-refund")
		req.Header.Set("Authorization", token)
		resp, err := (&http.Client{Transport: rt}).Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	if resp, err := send("Bearer old"); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("the write: %v, %v", resp, err)
	}
	resp, err := send("Bearer refreshed")
	var kc *retryfuse.KeyConflictError
	if resp != nil || !errors.As(err, &kc) || !kc.ByServer || kc.Credentials || !errors.Is(err, retryfuse.ErrIdempotencyConflict) {
		t.Errorf("the repeat under a refreshed token: %v, %v; want a *KeyConflictError by the server", resp, err)
	}
	if n := next.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}
