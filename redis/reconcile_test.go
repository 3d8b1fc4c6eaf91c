package retryfuseredis

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// The README's reconcile flow through a Transport with the Redis ledger:
// a keyed write whose response never comes is left uncertain, the caller
// resolves it with the context that has already ended, and the next call
// under the key is sent again (not applied) or not (applied).

// newStallServer applies every keyed POST; it never answers the first
// (applied, and the response held until the client gives up), and answers
// the others 201. The Recorder counts the applied writes.
func newStallServer(t *testing.T) (*retryfusetest.Server, *retryfusetest.Recorder) {
	charges := retryfusetest.NewRecorder()
	h := charges.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	}))
	return retryfusetest.NewServer(t, h, retryfusetest.ApplyThenStall()), charges
}

// keyedPost sends a keyed POST whose body can be sent again (GetBody).
func keyedPost(ctx context.Context, c *http.Client, url, key string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte("amount=10")))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Idempotency-Key", key)
	return c.Do(req)
}

func TestReconcileResolvedWithTheExpiredContext(t *testing.T) {
	for _, applied := range []bool{false, true} {
		name := "not applied: the next call is sent"
		if applied {
			name = "applied: the next call is not sent"
		}
		t.Run(name, func(t *testing.T) {
			l := newTestLedger(t, LedgerConfig{})
			client := newTransport(t, &retryfuse.Transport{Keys: retryfuse.KeyPolicy{Ledger: l}})
			srv, charges := newStallServer(t)

			ctx, cancel := context.WithTimeout(bg(), 100*time.Millisecond)
			defer cancel()
			resp, err := keyedPost(ctx, client, srv.URL, "order-1")
			if err == nil {
				resp.Body.Close()
				t.Fatalf("first call: got %d, want a *ReconcileRequiredError", resp.StatusCode)
			}
			var rec *retryfuse.ReconcileRequiredError
			if !errors.As(err, &rec) {
				t.Fatalf("first call: got %v, want a *ReconcileRequiredError", err)
			}
			if ctx.Err() == nil {
				t.Fatal("the caller's context has not ended")
			}
			if err := rec.Resolve(ctx, applied); err != nil {
				t.Fatalf("Resolve(the expired context, %v): %v", applied, err)
			}

			resp, err = keyedPost(bg(), client, srv.URL, "order-1")
			if !applied {
				if err != nil {
					t.Fatalf("the call after Resolve(ctx, false): %v, want it sent", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated || string(body) != "charged" {
					t.Fatalf("the call after Resolve(ctx, false): got %d %q, want 201 \"charged\"", resp.StatusCode, body)
				}
				if n := charges.Total(); n != 2 {
					t.Fatalf("server applied %d requests, want 2", n)
				}
				return
			}
			if err == nil {
				resp.Body.Close()
				t.Fatalf("the call after Resolve(ctx, true): got %d, want ErrAlreadyApplied", resp.StatusCode)
			}
			if !errors.Is(err, retryfuse.ErrAlreadyApplied) || errors.As(err, &rec) {
				t.Fatalf("the call after Resolve(ctx, true): got %v, want ErrAlreadyApplied, not a reconcile error", err)
			}
			if n := charges.Total(); n != 1 {
				t.Fatalf("server applied %d requests, want 1: the call after Resolve(ctx, true) is not sent", n)
			}
		})
	}
}
