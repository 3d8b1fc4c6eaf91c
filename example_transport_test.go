package retryfuse_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
)

// A GET answered 503 is repeated; the 200 that follows is what the caller
// gets.
func ExampleTransport() {
	var received atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if received.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	client := &http.Client{Transport: &retryfuse.Transport{
		Retry: retryfuse.RetryPolicy{
			InitialBackoff: time.Millisecond,
		},
	}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(body))
	fmt.Println("server received:", received.Load())
	// Output:
	// 200 OK hello
	// server received: 2
}

// A POST is repeated only when it carries an Idempotency-Key and a body that
// can be sent again (http.NewRequest sets GetBody for strings.Reader,
// bytes.Reader and bytes.Buffer). Each attempt sends the same key and body.
// Without a key, the 503 comes back as it is.
func ExampleTransport_keyedPost() {
	var mu sync.Mutex
	seen := map[string]int{} // requests per key
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		n := seen[key]
		mu.Unlock()
		fmt.Printf("server: key %q, body %s, request %d\n", key, body, n)
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	client := &http.Client{Transport: &retryfuse.Transport{Retry: retryfuse.RetryPolicy{InitialBackoff: time.Millisecond}}}

	for _, key := range []string{"order-42", ""} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"sku":"A1"}`))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("client: key %q: %s\n", key, resp.Status)
	}
	// Output:
	// server: key "order-42", body {"sku":"A1"}, request 1
	// server: key "order-42", body {"sku":"A1"}, request 2
	// client: key "order-42": 201 Created
	// server: key "", body {"sku":"A1"}, request 1
	// client: key "": 503 Service Unavailable
}

// The server applies a charge, then drops the connection before answering.
// The charge may have happened, so the POST is not sent again, even with an
// idempotency key: the caller gets a *ReconcileRequiredError and looks the
// charge up by its key.
func ExampleReconcileRequiredError() {
	var mu sync.Mutex
	charges := map[string]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		charges[r.Header.Get("Idempotency-Key")]++ // applied...
		mu.Unlock()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close() // ...but the response is lost
		}
	})
	mux.HandleFunc("GET /charges/{key}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprint(w, charges[r.PathValue("key")])
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := &http.Client{Transport: &retryfuse.Transport{}}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":4200}`))
	req.Header.Set("Idempotency-Key", "pay-7")
	_, err := client.Do(req)

	var rec *retryfuse.ReconcileRequiredError
	if !errors.As(err, &rec) {
		fmt.Println("unexpected:", err)
		return
	}
	fmt.Println("reconcile required:", errors.Is(err, retryfuse.ErrReconcileRequired))
	fmt.Printf("%s, key %q, attempts %d, phase %s\n", rec.Method, rec.IdempotencyKey, rec.Attempts, rec.Phase)

	resp, err := client.Get(srv.URL + "/charges/" + rec.IdempotencyKey)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	n, _ := io.ReadAll(resp.Body)
	fmt.Println("charges applied under the key:", string(n))
	// Output:
	// reconcile required: true
	// POST, key "pay-7", attempts 1, phase post_write
	// charges applied under the key: 1
}

// One budget.Ratio shared by every caller of a dependency that is down. Each
// of 20 callers would send 3 attempts, 60 in all. The budget grants its
// reserve (10 retries per 10-second window by default) and then one retry
// per 10 requests, so the dependency sees 32. (The throttle, which would
// refuse most new calls to a dependency that rejects them all, is off here
// to show the budget alone; see ThrottlePolicy.)
func ExampleRetryPolicy_sharedBudget() {
	var mu sync.Mutex
	perCaller := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		perCaller[r.Header.Get("X-Caller")]++
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	budget, err := budget.NewRatio(budget.RatioConfig{})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &retryfuse.Transport{Retry: retryfuse.RetryPolicy{Budget: budget, InitialBackoff: time.Millisecond}, Load: retryfuse.LoadPolicy{Throttle: retryfuse.ThrottlePolicy{Disable: true}}}}
	var counts []string
	for i := range 20 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Caller", fmt.Sprint(i))
		resp, err := client.Do(req) // one after another, so that the output is the same on every run
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close() // the last 503
		mu.Lock()
		counts = append(counts, fmt.Sprint(perCaller[fmt.Sprint(i)]))
		mu.Unlock()
	}
	s := budget.Snapshot()
	fmt.Println("requests per caller:", strings.Join(counts, " "))
	fmt.Printf("requests %d, retries granted %d, refused %d\n", s.Requests, s.Retries, s.Refused)
	fmt.Println("server received:", s.Requests+s.Retries)
	// Output:
	// requests per caller: 3 3 3 3 3 1 1 1 1 2 1 1 1 1 1 1 1 1 1 2
	// requests 20, retries granted 12, refused 15
	// server received: 32
}
