package retryfuse

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/hashicorp/go-cleanhttp"
)

// BenchmarkTransportKeyedPOSTLoopback sends a keyed POST of 16 KiB through
// a real http.Transport to a loopback server: bare, then under the
// Transport without and with a ledger.Memory. Unlike
// BenchmarkTransportOverheadKeyedPOST, net/http writes the body itself, so
// what a wrapped body costs it (headers flushed apart from the body, a
// copy buffer) shows. The server's allocations are counted too, alike for
// every sub-benchmark.
func BenchmarkTransportKeyedPOSTLoopback(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	body := bytes.Repeat([]byte("x"), 16<<10)
	for _, bt := range []struct {
		name string
		rt   func(base http.RoundTripper) http.RoundTripper
	}{
		{"bare", func(base http.RoundTripper) http.RoundTripper { return base }},
		{"retryfuse", func(base http.RoundTripper) http.RoundTripper { return &Transport{Base: base} }},
		{"retryfuse_ledger", func(base http.RoundTripper) http.RoundTripper {
			return &Transport{Base: base, Keys: KeyPolicy{Ledger: mustMemoryLedger(b)}}
		}},
	} {
		b.Run(bt.name, func(b *testing.B) {
			base := cleanhttp.DefaultPooledTransport()
			defer base.CloseIdleConnections()
			rt := bt.rt(base)
			n := 0
			post := func() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", bytes.NewReader(body))
				n++
				req.Header.Set("Idempotency-Key", "order-"+strconv.Itoa(n)) // a new key each call: no replay
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Fatalf("status %d, want 201", resp.StatusCode)
				}
			}
			post() // the connection is open before the timing starts
			b.ReportAllocs()
			for b.Loop() {
				post()
			}
		})
	}
}
