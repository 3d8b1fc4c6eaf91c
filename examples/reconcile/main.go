// Command reconcile shows what to do when the response to a write is lost.
//
// A POST that reached the server but whose response never came back may
// have taken effect. retryfuse never sends it again on its own: it returns
// a *retryfuse.ReconcileRequiredError, and the caller (or a Reconciler set
// as the Transport's Keys.Reconciler) looks the effect up by its
// idempotency key.
//
// The program starts a small orders API on a loopback port. The API applies
// every POST /orders and then, the first time it sees a key, loses the
// response: it holds it back until the client gives up. GET /orders?key=K
// looks an order up. Run it with:
//
//	go run ./examples/reconcile
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/ledger"
)

// attemptTimeout is how long the client waits for a response to each attempt.
const attemptTimeout = 500 * time.Millisecond

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "reconcile:", err)
		os.Exit(1)
	}
}

// run plays both ways of reconciling against a fresh orders API, printing
// each step to w. It fails if any order was applied other than once.
func run(w io.Writer) error {
	out := &lockedWriter{w: w}
	api := newOrdersAPI(out)
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer api.shutdown() // runs first: a held response is let go

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	fmt.Fprintln(out, "== 1. The caller reconciles the *ReconcileRequiredError itself")
	if err := callerReconciles(ctx, out, srv.URL, api); err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "== 2. A Reconciler on the Transport reconciles")
	if err := transportReconciles(ctx, out, srv.URL, api); err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "orders applied in all: %d (one per order: nothing was applied twice)\n", api.total())
	return nil
}

// callerReconciles sends an order with a plain retryfuse Transport (and a
// key ledger) and handles the reconcile error by looking the order up.
func callerReconciles(ctx context.Context, out io.Writer, base string, api *ordersAPI) error {
	const key = "checkout-1001"
	tr := &retryfuse.Transport{Retry: retryfuse.RetryPolicy{AttemptTimeout: attemptTimeout}, Keys: retryfuse.KeyPolicy{Ledger: &ledger.Memory{}}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	fmt.Fprintf(out, "client: POST /orders (Idempotency-Key %s)\n", key)
	resp, err := postOrder(ctx, client, base, key, `{"item":"espresso machine"}`)
	if err == nil {
		resp.Body.Close()
		return fmt.Errorf("POST: got %s, want the response lost", resp.Status)
	}
	var rerr *retryfuse.ReconcileRequiredError
	if !errors.As(err, &rerr) {
		return fmt.Errorf("POST: got %v, want a *retryfuse.ReconcileRequiredError", err)
	}
	fmt.Fprintf(out, "client: no response after %d attempt (phase %s): the order may exist; it is not sent again\n", rerr.Attempts, rerr.Phase)

	// Sending it again under the same key is refused until it is reconciled.
	_, err = postOrder(ctx, client, base, key, `{"item":"espresso machine"}`)
	if !errors.As(err, &rerr) || !rerr.Earlier {
		return fmt.Errorf("POST again: got %v, want a *retryfuse.ReconcileRequiredError for the earlier call", err)
	}
	fmt.Fprintln(out, "client: POST again under the same key: refused without sending (an earlier call under it is uncertain)")

	fmt.Fprintf(out, "client: GET /orders?key=%s\n", rerr.IdempotencyKey)
	found, err := lookupOrder(ctx, client, base, rerr.IdempotencyKey)
	if err != nil {
		return err
	}
	if found == nil {
		// Not applied: now, and only now, it is safe to send it again
		// (under a new key, since this one stays held).
		return errors.New("lookup: the order does not exist; this server always applies it")
	}
	body, err := readAll(found)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "client: the order exists: %s\n", body)
	return api.check(out, key)
}

// transportReconciles sends an order with a Transport whose Reconciler looks
// the order up (through the same client) before any error is returned.
func transportReconciles(ctx context.Context, out io.Writer, base string, api *ordersAPI) error {
	const key = "checkout-1002"
	tr := &retryfuse.Transport{Retry: retryfuse.RetryPolicy{AttemptTimeout: attemptTimeout}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	tr.Keys.Reconciler = retryfuse.Reconciler(func(ctx context.Context, rerr *retryfuse.ReconcileRequiredError) (*http.Response, bool, error) {
		fmt.Fprintf(out, "reconciler: no response for %s %s; GET /orders?key=%s\n", rerr.Method, rerr.URL, rerr.IdempotencyKey)
		resp, err := lookupOrder(ctx, client, base, rerr.IdempotencyKey)
		switch {
		case err != nil:
			return nil, false, err // still unknown: the error goes back
		case resp == nil:
			fmt.Fprintln(out, "reconciler: not applied: the Transport may send it again")
			return nil, false, nil
		}
		fmt.Fprintln(out, "reconciler: applied")
		return resp, true, nil
	})

	fmt.Fprintf(out, "client: POST /orders (Idempotency-Key %s)\n", key)
	resp, err := postOrder(ctx, client, base, key, `{"item":"coffee grinder"}`)
	if err != nil {
		return fmt.Errorf("POST: got %v, want the reconciled order", err)
	}
	body, err := readAll(resp)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "client: got %s %s (no error to handle)\n", resp.Status, body)
	return api.check(out, key)
}

func postOrder(ctx context.Context, c *http.Client, base, key, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return c.Do(req)
}

// lookupOrder gets the order made under key: its response (200), or nil
// when there is none (404).
func lookupOrder(ctx context.Context, c *http.Client, base, key string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/orders?key="+url.QueryEscape(key), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return resp, nil
	case http.StatusNotFound:
		resp.Body.Close()
		return nil, nil
	}
	resp.Body.Close()
	return nil, fmt.Errorf("lookup: unexpected %s", resp.Status)
}

func readAll(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

// ordersAPI applies every POST /orders (it does not deduplicate keys, so
// that a repeat would show as a second order) and loses the response the
// first time it sees a key.
type ordersAPI struct {
	out  io.Writer
	stop chan struct{}
	once sync.Once

	mu      sync.Mutex
	orders  map[string]string // order by idempotency key
	applied map[string]int    // orders applied by idempotency key
	n       int
}

func newOrdersAPI(out io.Writer) *ordersAPI {
	return &ordersAPI{out: out, stop: make(chan struct{}), orders: map[string]string{}, applied: map[string]int{}}
}

func (a *ordersAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body) // read whole: the client's hang-up then ends r.Context()
	if r.URL.Path != "/orders" {
		http.NotFound(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	switch r.Method {
	case http.MethodGet:
		a.mu.Lock()
		order, ok := a.orders[r.URL.Query().Get("key")]
		a.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, order)
	case http.MethodPost:
		if key == "" {
			http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.n++
		order := fmt.Sprintf(`{"id":"ord-%d","item":%s}`, a.n, body)
		a.orders[key] = order
		a.applied[key]++
		first := a.applied[key] == 1
		a.mu.Unlock()
		if first {
			fmt.Fprintf(a.out, "server: applied order ord-%d for key %s, then lost the response\n", a.n, key)
			select { // hold the response until the client gives up
			case <-r.Context().Done():
			case <-a.stop:
			}
			return
		}
		fmt.Fprintf(a.out, "server: applied order ord-%d for key %s\n", a.n, key)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, order)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// check prints how often the order under key was applied, and fails
// unless it was exactly once.
func (a *ordersAPI) check(out io.Writer, key string) error {
	a.mu.Lock()
	n := a.applied[key]
	a.mu.Unlock()
	fmt.Fprintf(out, "effects applied for %s: %d\n", key, n)
	if n != 1 {
		return fmt.Errorf("order %s applied %d times, want once", key, n)
	}
	return nil
}

func (a *ordersAPI) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

func (a *ordersAPI) shutdown() { a.once.Do(func() { close(a.stop) }) }

// lockedWriter lets the server's goroutines and the client print to one
// writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
