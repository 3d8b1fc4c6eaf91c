package retryfuse_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
)

// A GET answered 503 is repeated; the caller sees only the final answer.
func Example() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	tr := &retryfuse.Transport{Retry: retryfuse.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", calls.Load(), "attempts")
	// Output: 200 hello after 2 attempts
}

// A POST carrying an Idempotency-Key and a replayable body may be
// repeated: the server receives the same key on every attempt.
func ExampleTransport_idempotencyKey() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := calls.Add(1)
		fmt.Printf("attempt %d: key %s, body %s\n", n, r.Header.Get("Idempotency-Key"), body)
		if n == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	tr := &retryfuse.Transport{Retry: retryfuse.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	// strings.Reader gives the request a GetBody: its body can be replayed.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"sku":"A1"}`))
	req.Header.Set("Idempotency-Key", "order-7f3a")
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// attempt 1: key order-7f3a, body {"sku":"A1"}
	// attempt 2: key order-7f3a, body {"sku":"A1"}
	// 201 Created
}

// A write whose outcome is uncertain is never replayed: the caller gets a
// *ReconcileRequiredError and looks the effect up by its key.
func ExampleReconcileRequiredError_attemptTimeout() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the payment is applied...
		<-r.Context().Done()        // ...and the answer never comes
	}))
	defer srv.Close()

	tr := &retryfuse.Transport{Retry: retryfuse.RetryPolicy{AttemptTimeout: 50 * time.Millisecond}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":10}`))
	req.Header.Set("Idempotency-Key", "pay-1234")
	_, err := client.Do(req)

	var rec *retryfuse.ReconcileRequiredError
	if errors.As(err, &rec) {
		fmt.Println("reconcile", rec.Method, "key", rec.IdempotencyKey)
		fmt.Println("attempts:", rec.Attempts, "phase:", rec.Phase)
		fmt.Println("timed out:", errors.Is(err, retryfuse.ErrAttemptTimeout))
	}
	// Output:
	// reconcile POST key pay-1234
	// attempts: 1 phase: post_write
	// timed out: true
}
