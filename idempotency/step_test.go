package idempotency

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse"
)

// stepKeys runs a request under key (and scope, in X-Tenant) through h,
// made by newStepHandler, which appends the key it derived to got.
func stepKeys(t *testing.T, h *Handler, scope, key string) {
	t.Helper()
	r := post("/charges", key, "x")
	r.Header.Set("X-Tenant", scope)
	if w := serve(h, r); w.Code != http.StatusAccepted {
		t.Fatalf("status %d, want the handler's 202 (body %s)", w.Code, w.Body)
	}
}

// newStepHandler returns the middleware in front of a handler that
// derives the key of step, appends it to got and releases its key, so
// that every request under a key runs it.
func newStepHandler(t *testing.T, step string, got *[]string) *Handler {
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := StepKey(r.Context(), step)
		if err != nil {
			t.Errorf("StepKey: %v", err)
		}
		*got = append(*got, k)
		Release(w) // the next request under the key runs the handler again
		w.WriteHeader(http.StatusAccepted)
	}), Config{Scope: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
	return h
}

func TestStepKeyIsStableAcrossRunsOfOneRequest(t *testing.T) {
	var got []string
	h := newStepHandler(t, "charge-card", &got)
	stepKeys(t, h, "tenant-a", "k1")
	stepKeys(t, h, "tenant-a", "k1")
	if len(got) != 2 || got[0] != got[1] {
		t.Fatalf("keys of two runs of one request: %q, want one key twice", got)
	}
	if len(got[0]) != 64 || strings.Trim(got[0], "0123456789abcdef") != "" {
		t.Errorf("key %q: want 64 hex digits", got[0])
	}
}

func TestStepKeyDiffersByScopeKeyAndStep(t *testing.T) {
	keyOf := func(step, scope, key string) string {
		var got []string
		stepKeys(t, newStepHandler(t, step, &got), scope, key)
		return got[0]
	}
	seen := map[string]string{}
	for _, c := range [][3]string{
		{"charge-card", "tenant-a", "k1"},
		{"charge-card", "tenant-a", "k2"},
		{"charge-card", "tenant-b", "k1"},
		{"send-receipt", "tenant-a", "k1"},
		{"charge-card", "tenant-ak", "1"}, // the same bytes, cut elsewhere
		{"charge-card", "tenant-", "ak1"},
		{"1", "tenant-a", "k"},
	} {
		k := keyOf(c[0], c[1], c[2])
		if prev, dup := seen[k]; dup {
			t.Errorf("step %q scope %q key %q: the key of %s", c[0], c[1], c[2], prev)
		}
		seen[k] = "step " + c[0] + " scope " + c[1] + " key " + c[2]
	}
}

func TestStepOutsideAKeyedRequestIsAnError(t *testing.T) {
	if _, err := StepKey(context.Background(), "charge-card"); !errors.Is(err, ErrNotKeyed) {
		t.Errorf("StepKey outside the middleware: %v, want ErrNotKeyed", err)
	}
	var stepErr error
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, stepErr = Step(r.Context(), "charge-card")
	}), Config{KeyOptional: true})
	serve(h, post("/charges", "", "x"))
	if !errors.Is(stepErr, ErrNotKeyed) {
		t.Errorf("Step in a request without a key: %v, want ErrNotKeyed", stepErr)
	}
	h, _ = newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, stepErr = Step(r.Context(), "")
	}), Config{})
	serve(h, post("/charges", "k", "x"))
	if !errors.Is(stepErr, retryfuse.ErrInvalidIdempotencyKey) {
		t.Errorf("Step with an empty name: %v, want an error wrapping ErrInvalidIdempotencyKey", stepErr)
	}
}

// The call a handler makes with Step's context through retryfuse's
// Transport reaches the downstream server under the step's key.
func TestStepKeyIsSentByTheTransport(t *testing.T) {
	var sent []string
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent = append(sent, r.Header.Get("Idempotency-Key"))
	}))
	defer downstream.Close()
	client := &http.Client{Transport: &retryfuse.Transport{}}
	defer client.CloseIdleConnections()
	var want []string
	h, _ := newHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, err := Step(r.Context(), "charge-card")
		if err != nil {
			t.Fatalf("Step: %v", err)
		}
		k, _ := StepKey(r.Context(), "charge-card")
		want = append(want, k)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, downstream.URL+"/charges", strings.NewReader("10 EUR"))
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("downstream call: %v", err)
			return
		}
		resp.Body.Close()
		Release(w)
		w.WriteHeader(http.StatusAccepted)
	}), Config{})
	serve(h, post("/orders", "order-7", "x"))
	serve(h, post("/orders", "order-7", "x")) // the handler runs again: a re-run
	if len(sent) != 2 || sent[0] != want[0] || sent[1] != want[0] {
		t.Errorf("downstream keys %q, want %q twice", sent, want[0])
	}
}
