package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse"
)

// lostResults: a keyed POST whose response is lost after the server
// applied it.
type lostResults struct {
	PlainApplied int // times the plain loop's payment was applied
	FuseApplied  int // times retryfuse's payment was applied
	PlainOutcome string
	FuseOutcome  string
	PlainElapsed time.Duration
	FuseElapsed  time.Duration
	// Reconcile is the *ReconcileRequiredError retryfuse returned, if any.
	Reconcile *retryfuse.ReconcileRequiredError
	// LookupApplied is what the lookup by key found on the server: the
	// number of times the payment under the key was applied (-1: the
	// lookup failed).
	LookupApplied int
}

// payments applies every POST it receives, records it under its
// Idempotency-Key for lookups, and then stalls: its response is lost.
type payments struct {
	stall   time.Duration
	mu      sync.Mutex
	applied map[string]int
}

func newPayments(stall time.Duration) (*payments, http.Handler) {
	p := &payments{stall: stall, applied: make(map[string]int)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", p.create)
	mux.HandleFunc("GET /payments/{key}", p.lookup)
	return p, mux
}

func (p *payments) create(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	p.mu.Lock()
	p.applied[r.Header.Get("Idempotency-Key")]++
	p.mu.Unlock()
	timer := time.NewTimer(p.stall)
	defer timer.Stop()
	select {
	case <-r.Context().Done(): // the client gave up
	case <-timer.C:
	}
	w.WriteHeader(http.StatusCreated)
}

func (p *payments) lookup(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	p.mu.Lock()
	n := p.applied[key]
	p.mu.Unlock()
	if n == 0 {
		http.NotFound(w, r)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"key": key, "applied": n})
}

func (p *payments) count(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied[key]
}

// runLost sends one keyed POST through each side; the server applies it
// and stalls past the attempt timeout.
func runLost(srv *servers) (lostResults, error) {
	res := lostResults{LookupApplied: -1}
	pay, h := newPayments(20 * lostAttemptTimeout)
	s, err := srv.start("payments", h)
	if err != nil {
		return res, err
	}
	const plainKey, fuseKey = "order-1001", "order-1002"

	plain := srv.newPlain(lostAttemptTimeout)
	began := time.Now()
	resp, err := plain.do(context.Background(), poster(s.URL+"/payments", plainKey))
	res.PlainElapsed = time.Since(began)
	res.PlainOutcome = describe(resp, err)
	drainClose(resp)
	res.PlainApplied = pay.count(plainKey)

	client := &http.Client{Transport: srv.newFuse(lostAttemptTimeout)}
	began = time.Now()
	req, err := poster(s.URL+"/payments", fuseKey)(context.Background())
	if err != nil {
		return res, err
	}
	resp, err = client.Do(req)
	res.FuseElapsed = time.Since(began)
	res.FuseOutcome = describe(resp, err)
	drainClose(resp)
	res.FuseApplied = pay.count(fuseKey)

	// Reconcile: look the payment up by its key, as a caller would.
	if errors.As(err, &res.Reconcile) {
		res.LookupApplied, err = lookupPayment(client, s.URL, res.Reconcile.IdempotencyKey)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// poster makes POSTs of one payment under an idempotency key; the body is
// replayable (http.NewRequest sets GetBody for a bytes.Reader).
func poster(url, key string) func(context.Context) (*http.Request, error) {
	body := []byte(`{"amount":"42.00","currency":"EUR"}`)
	return func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		return req, nil
	}
}

// lookupPayment asks the server how many times the payment under key was
// applied: 0 when it has none.
func lookupPayment(client *http.Client, base, key string) (int, error) {
	resp, err := client.Get(base + "/payments/" + key)
	if err != nil {
		return -1, fmt.Errorf("lookup by key: %w", err)
	}
	defer drainClose(resp)
	switch resp.StatusCode {
	case http.StatusNotFound:
		return 0, nil
	case http.StatusOK:
		var found struct{ Applied int }
		if err := json.NewDecoder(resp.Body).Decode(&found); err != nil {
			return -1, fmt.Errorf("lookup by key: %w", err)
		}
		return found.Applied, nil
	}
	return -1, fmt.Errorf("lookup by key: unexpected %s", resp.Status)
}
