package retryfusetest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// charge is the code under test, a payment client's: it charges under key
// and, when the outcome is uncertain, looks the charge up by its key and
// settles the key with what it found.
func charge(ctx context.Context, c *http.Client, base, key string) (applied bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/charges", strings.NewReader(`{"amount":1000}`))
	if err != nil {
		return false, err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	var rec *retryfuse.ReconcileRequiredError
	if errors.As(err, &rec) {
		look, err := c.Get(base + "/charges/" + key)
		if err != nil {
			return false, err // still uncertain: the key stays held
		}
		_ = look.Body.Close()
		applied = look.StatusCode == http.StatusOK
		return applied, rec.Resolve(ctx, applied)
	}
	if err != nil {
		return false, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusCreated, nil
}

// paymentsAPI is a fake of the payments API: a charge recorded under its
// key, and its lookup by key.
func paymentsAPI(charges *retryfusetest.Recorder) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /charges", charges.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	mux.HandleFunc("GET /charges/{key}", func(w http.ResponseWriter, r *http.Request) {
		if charges.Applied(r.PathValue("key")) == 0 {
			w.WriteHeader(http.StatusNotFound)
		}
	})
	return mux
}

// TestChargeIsReconciledWhenItsResponseIsLost is the whole test a user
// writes for the reconcile path of charge, fake API included.
func TestChargeIsReconciledWhenItsResponseIsLost(t *testing.T) {
	charges := retryfusetest.NewRecorder()
	api := http.NewServeMux()
	api.Handle("POST /charges", charges.Wrap(nil))
	api.HandleFunc("GET /charges/{key}", func(w http.ResponseWriter, r *http.Request) {
		if charges.Applied(r.PathValue("key")) == 0 {
			w.WriteHeader(http.StatusNotFound)
		}
	})
	fake := retryfusetest.NewTransport(api, retryfusetest.ApplyThenReset())
	client := &http.Client{Transport: &retryfuse.Transport{Base: fake}}

	applied, err := charge(t.Context(), client, "https://payments.test", "order-42")
	if err != nil || !applied {
		t.Fatalf("charge: applied %v, error %v; want applied", applied, err)
	}
	charges.ExactlyOnce(t, "order-42")
}

// The charge is applied and its response lost: the client looks it up,
// finds it and settles the key as applied, and the charge is not sent
// again.
func TestChargeWhoseResponseIsLostIsReconciledAsApplied(t *testing.T) {
	charges := retryfusetest.NewRecorder()
	api := retryfusetest.NewTransport(paymentsAPI(charges), retryfusetest.ApplyThenReset())
	client := &http.Client{Transport: &retryfuse.Transport{Base: api}}

	applied, err := charge(t.Context(), client, "https://payments.test", "order-42")
	if err != nil || !applied {
		t.Fatalf("charge: got applied %v, error %v; want applied, no error", applied, err)
	}
	charges.ExactlyOnce(t, "order-42")

	// Settled as applied: the key is done, and a repeat is refused.
	_, err = charge(t.Context(), client, "https://payments.test", "order-42")
	if !errors.Is(err, retryfuse.ErrAlreadyApplied) {
		t.Errorf("repeated charge: got %v, want ErrAlreadyApplied", err)
	}
	charges.AtMostOnce(t)
}

// The connection is reset before the server read the charge: the client
// cannot tell, looks it up, finds nothing, and settles the key as not
// applied, which frees it for the next try.
func TestChargeResetBeforeReadIsReconciledAsNotApplied(t *testing.T) {
	charges := retryfusetest.NewRecorder()
	api := retryfusetest.NewTransport(paymentsAPI(charges), retryfusetest.ResetBeforeRead())
	client := &http.Client{Transport: &retryfuse.Transport{Base: api}}

	applied, err := charge(t.Context(), client, "https://payments.test", "order-43")
	if err != nil || applied {
		t.Fatalf("charge: got applied %v, error %v; want not applied, no error", applied, err)
	}
	charges.NotApplied(t, "order-43")

	applied, err = charge(t.Context(), client, "https://payments.test", "order-43")
	if err != nil || !applied {
		t.Fatalf("second charge: got applied %v, error %v; want applied", applied, err)
	}
	charges.ExactlyOnce(t, "order-43")
}

// Example_reconcile is a payment client's reconcile path: the charge is
// applied, its response lost; the client looks it up and settles the key.
func Example_reconcile() {
	charges := retryfusetest.NewRecorder()
	api := retryfusetest.NewTransport(paymentsAPI(charges), retryfusetest.ApplyThenReset())
	client := &http.Client{Transport: &retryfuse.Transport{Base: api}}

	applied, err := charge(context.Background(), client, "https://payments.test", "order-42")
	fmt.Println("applied:", applied, "error:", err)
	fmt.Println("charges under order-42:", charges.Applied("order-42"))
	fmt.Println("faults met:", api.Met())
	// Output:
	// applied: true error: <nil>
	// charges under order-42: 1
	// faults met: [ApplyThenReset() Answer()]
}
