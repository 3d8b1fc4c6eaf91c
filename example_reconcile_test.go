package retryfuse_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse"
)

// Settling a reconcile error after the call's own context has ended: the
// charge is looked up on a context that keeps the call's values but not its
// cancellation, with a timeout of its own, and Resolve records what the
// lookup found. A later call under the key is then not sent: the charge
// was applied, and its result was not kept to replay.
func ExampleReconcileRequiredError_Resolve() {
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
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tr := &retryfuse.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	chargeExists := func(ctx context.Context, key string) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err // a lookup on the call's ended context would fail here
		}
		mu.Lock()
		defer mu.Unlock()
		return charges[key] > 0, nil
	}
	pay := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":4200}`))
		req.Header.Set("Idempotency-Key", "pay-8")
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	err := pay(ctx)
	cancel() // the call's context has ended by the time the error is handled

	var rec *retryfuse.ReconcileRequiredError
	if errors.As(err, &rec) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		applied, err := chargeExists(lctx, rec.IdempotencyKey)
		if err != nil {
			fmt.Println("cannot tell yet:", err)
			return
		}
		fmt.Println("applied:", applied)
		if err := rec.Resolve(lctx, applied); err != nil {
			fmt.Println(err)
			return
		}
	}
	err = pay(context.Background())
	fmt.Println("the repeat is not sent:", errors.Is(err, retryfuse.ErrAlreadyApplied))
	mu.Lock()
	fmt.Println("charges applied:", charges["pay-8"])
	mu.Unlock()
	// Output:
	// applied: true
	// the repeat is not sent: true
	// charges applied: 1
}
