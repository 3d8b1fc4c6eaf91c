package idempotency_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/retryfuse/retryfuse/idempotency"
)

// The middleware in front of a handler that charges: the same request sent
// twice under one key runs the handler once, and the repeat gets the first
// response back, marked as replayed. The same key with another body is
// refused.
func Example() {
	var charges atomic.Int64
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d", n)
	})
	h, err := idempotency.New(charge, idempotency.Config{}) // a ledger.Memory of its own
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	post := func(body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusCreated {
			fmt.Printf("%d %q replayed=%q\n", resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed"))
			return
		}
		fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	post(`{"amount":4200}`)
	post(`{"amount":4200}`) // a repeat: not run again
	post(`{"amount":9900}`) // the key with another body
	fmt.Println("charges applied:", charges.Load())
	// Output:
	// 201 "charge 1" replayed=""
	// 201 "charge 1" replayed="true"
	// 422 application/problem+json
	// charges applied: 1
}
