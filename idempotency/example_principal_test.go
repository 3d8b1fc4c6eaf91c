package idempotency_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/retryfuse/retryfuse/idempotency"
)

// subjects stands for the application's authentication: the principal a
// verified token names.
var subjects = map[string]string{"Bearer alice-1": "alice", "Bearer alice-2": "alice", "Bearer bob-1": "bob"}

// refund is the application's handler.
var refund = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, "refund for ", subjects[r.Header.Get("Authorization")])
})

// post sends a refund under key with token to url and prints the answer.
func post(url, token, key string) {
	req, _ := http.NewRequest(http.MethodPost, url+"/refunds", strings.NewReader(`{"order":123}`))
	req.Header.Set("Authorization", token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		body = []byte("(problem details)")
	}
	fmt.Printf("%s: %d replayed=%q %s\n", token, resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), body)
}

// Keys scoped by the principal the application verified: each principal
// has keys of its own, and one whose token was refreshed still gets its
// replay.
func ExampleConfig_scope() {
	h, err := idempotency.New(refund, idempotency.Config{
		Scope: func(r *http.Request) string { return subjects[r.Header.Get("Authorization")] },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	post(srv.URL, "Bearer alice-1", "order-123-refund")
	post(srv.URL, "Bearer alice-2", "order-123-refund") // alice, her token refreshed
	post(srv.URL, "Bearer bob-1", "order-123-refund")   // bob, who chose the same key
	// Output:
	// Bearer alice-1: 201 replayed="" refund for alice
	// Bearer alice-2: 201 replayed="true" refund for alice
	// Bearer bob-1: 201 replayed="" refund for bob
}

// Without a Scope, the credentials a request carries are part of what a
// repeat must match: another principal's request under the key is
// refused, and so is the same principal's under a refreshed token (422),
// never given the stored response nor run again.
func ExampleConfig_credentials() {
	h, err := idempotency.New(refund, idempotency.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	post(srv.URL, "Bearer alice-1", "order-123-refund")
	post(srv.URL, "Bearer alice-1", "order-123-refund")
	post(srv.URL, "Bearer bob-1", "order-123-refund")
	post(srv.URL, "Bearer alice-2", "order-123-refund")
	// Output:
	// Bearer alice-1: 201 replayed="" refund for alice
	// Bearer alice-1: 201 replayed="true" refund for alice
	// Bearer bob-1: 422 replayed="" (problem details)
	// Bearer alice-2: 422 replayed="" (problem details)
}
