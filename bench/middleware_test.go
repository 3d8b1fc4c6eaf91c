package bench

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse/idempotency"
)

// The server half's cost: a small handler served over loopback HTTP bare
// and behind the idempotency middleware (its own ledger.Memory), called by
// bare net/http clients, one call to each server per iteration, in an
// order that rotates: what the middleware adds to a request as a client
// sees it, the network and net/http's server included.

// smallHandler reads the body and answers with a small JSON body: 201 to
// a POST, 200 to a GET.
var smallHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodPost {
		w.WriteHeader(http.StatusCreated)
	}
	_, _ = io.WriteString(w, `{"id":"ch_1","amount":4200,"currency":"EUR"}`)
})

// chargeBody is the body of every keyed POST: a small JSON payment.
var chargeBody = []byte(`{"amount":4200,"currency":"EUR","customer":"cus_123"}`)

// target is one server under comparison and the client that calls it.
type target struct {
	name   string
	srv    *httptest.Server
	client *http.Client
	base   *http.Transport
}

// middlewareTargets are the bare handler and the handler behind the
// middleware with its defaults (a ledger.Memory of its own: 10,000 keys,
// the least recently used evicted past them), each on a loopback server
// of its own, called through a fresh cleanhttp.DefaultPooledTransport.
func middlewareTargets(tb testing.TB) []target {
	h, err := idempotency.New(smallHandler, idempotency.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	var ts []target
	for _, t := range []struct {
		name string
		h    http.Handler
	}{{"bare", smallHandler}, {"middleware", h}} {
		srv := httptest.NewServer(t.h)
		tb.Cleanup(srv.Close)
		base := cleanhttp.DefaultPooledTransport()
		tb.Cleanup(base.CloseIdleConnections)
		ts = append(ts, target{t.name, srv, &http.Client{Transport: base}, base})
	}
	return ts
}

// callKeys numbers the keys of the keyed POSTs: each call has its own.
var callKeys atomic.Uint64

// keyedCharge is a POST of chargeBody to url under a key of its own.
func keyedCharge(url string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/charges", bytes.NewReader(chargeBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "order-"+strconv.FormatUint(callKeys.Add(1), 10))
	return req
}

// unkeyedGET is a GET of a charge at url.
func unkeyedGET(url string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/charges/ch_1", nil)
	return req
}

// callTarget sends req through t's client, reads and closes the body, and
// checks the status and whether the middleware handled it.
func callTarget(t target, req *http.Request, want int, handled bool) error {
	resp, err := t.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %v", t.name, err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch {
	case err != nil:
		return fmt.Errorf("%s: reading the body: %v", t.name, err)
	case resp.StatusCode != want:
		return fmt.Errorf("%s: status %d, want %d", t.name, resp.StatusCode, want)
	case (resp.Header.Get(idempotency.HeaderHonoured) == "?1") != handled:
		return fmt.Errorf("%s: handled by the middleware: %v, want %v", t.name, !handled, handled)
	case resp.Header.Get(idempotency.HeaderReplayed) != "":
		return fmt.Errorf("%s: a replay", t.name)
	}
	return nil
}

// interleavedTargets calls every target once per iteration, in an order
// that rotates each iteration, times each call (the request is built
// outside the timed span), and reports each target's mean
// (name-ns/call) and the middleware's ratio to bare (middleware-x).
func interleavedTargets(b *testing.B, ts []target, newReq func(url string) *http.Request, want int, handled bool) {
	for _, t := range ts { // warm each client's connection
		if err := callTarget(t, newReq(t.srv.URL), want, handled && t.name == "middleware"); err != nil {
			b.Fatal(err)
		}
	}
	total := make([]time.Duration, len(ts))
	iter := 0
	for b.Loop() {
		for k := range ts {
			i := (iter + k) % len(ts)
			req := newReq(ts[i].srv.URL)
			t0 := time.Now()
			err := callTarget(ts[i], req, want, handled && ts[i].name == "middleware")
			total[i] += time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
		}
		iter++
	}
	for i, t := range ts {
		b.ReportMetric(float64(total[i].Nanoseconds())/float64(iter), t.name+"-ns/call")
	}
	b.ReportMetric(float64(total[1])/float64(total[0]), "middleware-x")
	b.ReportMetric(0, "ns/op") // an iteration is both servers' calls, and both servers
}

// BenchmarkMiddlewareKeyedPOST: a keyed POST under a new key each call —
// read, fingerprinted, claimed, run and stored in the ledger.Memory —
// against the bare handler given the same request.
func BenchmarkMiddlewareKeyedPOST(b *testing.B) {
	interleavedTargets(b, middlewareTargets(b), keyedCharge, http.StatusCreated, true)
}

// BenchmarkMiddlewareUnkeyedGET: a GET, which the middleware passes to the
// handler untouched.
func BenchmarkMiddlewareUnkeyedGET(b *testing.B) {
	interleavedTargets(b, middlewareTargets(b), unkeyedGET, http.StatusOK, false)
}

// TestMiddlewareTargets pins what the benchmarks compare: the middleware
// handles a keyed POST (its marker) and stores it (a repeat is replayed,
// the handler not run again), and passes a GET through untouched; the
// bare server does neither.
func TestMiddlewareTargets(t *testing.T) {
	ts := middlewareTargets(t)
	for _, tg := range ts {
		mw := tg.name == "middleware"
		if err := callTarget(tg, keyedCharge(tg.srv.URL), http.StatusCreated, mw); err != nil {
			t.Error(err)
		}
		if err := callTarget(tg, unkeyedGET(tg.srv.URL), http.StatusOK, false); err != nil {
			t.Error(err)
		}
	}
	req := keyedCharge(ts[1].srv.URL)
	key := req.Header.Get("Idempotency-Key")
	if err := callTarget(ts[1], req, http.StatusCreated, true); err != nil {
		t.Fatal(err)
	}
	again, _ := http.NewRequest(http.MethodPost, ts[1].srv.URL+"/v1/charges", bytes.NewReader(chargeBody))
	again.Header.Set("Idempotency-Key", key)
	resp, err := ts[1].client.Do(again)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get(idempotency.HeaderReplayed) != "true" {
		t.Errorf("a repeat under the key: %d, replayed %q; want 201 replayed", resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed))
	}
}
