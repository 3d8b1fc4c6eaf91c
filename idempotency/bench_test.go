package idempotency

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

// The middleware's cost on a small handler, called directly (no network):
// each benchmark runs the bare handler and the handler behind the
// middleware on the same requests, built alike, in the same run.

// small is a small JSON handler: it reads the body and answers 201.
var small = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"id":"ch_1","amount":4200,"currency":"EUR"}`)
})

var benchBody = []byte(`{"amount":4200,"currency":"EUR","customer":"cus_123"}`)

// benchRequest returns a request like tmpl, with its own header (carrying
// key, when not empty) and body.
func benchRequest(tmpl *http.Request, key string) *http.Request {
	r := *tmpl
	r.Header = http.Header{"Content-Type": {"application/json"}}
	if key != "" {
		r.Header["Idempotency-Key"] = []string{key}
	}
	if tmpl.Method != http.MethodGet {
		r.Body = io.NopCloser(bytes.NewReader(benchBody))
		r.ContentLength = int64(len(benchBody))
	}
	return &r
}

func benchHandlers(b *testing.B) map[string]http.Handler {
	h, err := New(small, Config{})
	if err != nil {
		b.Fatal(err)
	}
	return map[string]http.Handler{"bare": small, "middleware": h}
}

// ledgerFloor is the bare handler after a ledger.Memory's Begin and before
// its Complete with a small stored response, and nothing else: the least
// that keeping keys in a ledger.Memory costs.
func ledgerFloor(b *testing.B) http.Handler {
	l := &ledger.Memory{}
	res := &ledger.StoredResponse{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"id":"ch_1","amount":4200,"currency":"EUR"}`)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header["Idempotency-Key"][0]
		c, err := l.Begin(r.Context(), key, ledger.Fingerprint{})
		if err != nil || c.State != decide.KeyNone {
			b.Fatalf("Begin: %v, %v", c.State, err)
		}
		small(w, r)
		if err := l.Complete(r.Context(), key, c.Token, res); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkKeyedPOST: a POST under a new key each time (the first request
// of its key: read, fingerprinted, claimed, run, stored in a
// ledger.Memory), against the bare handler given the same request, and
// against the floor of any use of a ledger.Memory (ledgerFloor). The
// ledger.Memory fills up to its 10000 keys, and then evicts one a request.
func BenchmarkKeyedPOST(b *testing.B) {
	tmpl := httptest.NewRequest(http.MethodPost, "/v1/charges", nil)
	handlers := benchHandlers(b)
	handlers["ledger_floor"] = ledgerFloor(b)
	for _, name := range []string{"bare", "ledger_floor", "middleware"} {
		h := handlers[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				w := httptest.NewRecorder()
				h.ServeHTTP(w, benchRequest(tmpl, "key-"+strconv.Itoa(i)))
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// BenchmarkReplayPOST: a POST under a completed key, answered from the
// ledger.Memory, against the bare handler given the same request.
func BenchmarkReplayPOST(b *testing.B) {
	tmpl := httptest.NewRequest(http.MethodPost, "/v1/charges", nil)
	handlers := benchHandlers(b)
	for _, name := range []string{"bare", "middleware"} {
		h := handlers[name]
		b.Run(name, func(b *testing.B) {
			h.ServeHTTP(httptest.NewRecorder(), benchRequest(tmpl, "replayed"))
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, benchRequest(tmpl, "replayed"))
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// BenchmarkUnkeyedGET: a GET, which the middleware passes through.
func BenchmarkUnkeyedGET(b *testing.B) {
	tmpl := httptest.NewRequest(http.MethodGet, "/v1/charges/ch_1", nil)
	handlers := benchHandlers(b)
	for _, name := range []string{"bare", "middleware"} {
		h := handlers[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, benchRequest(tmpl, ""))
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
