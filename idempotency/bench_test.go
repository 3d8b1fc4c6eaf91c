package idempotency

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
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

// BenchmarkKeyedPOSTWithAuthorization: BenchmarkKeyedPOST's requests
// carrying Authorization, which the middleware binds into the key's
// fingerprint by default (Config.Credentials), against the bare handler.
func BenchmarkKeyedPOSTWithAuthorization(b *testing.B) {
	tmpl := httptest.NewRequest(http.MethodPost, "/v1/charges", nil)
	handlers := benchHandlers(b)
	for _, name := range []string{"bare", "middleware"} {
		h := handlers[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				w := httptest.NewRecorder()
				r := benchRequest(tmpl, "key-"+strconv.Itoa(i))
				r.Header["Authorization"] = []string{"Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc"}
				h.ServeHTTP(w, r)
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// BenchmarkCredentialsBound: the cost of binding Authorization into the
// fingerprint, measured paired: each iteration sends one keyed POST with
// Authorization through a middleware that binds it (the default) and one
// through a middleware that binds nothing (Credentials.Headers empty, the
// path before credentials were bound), in alternating order, each timed
// on its own, so that a machine's load falls on both alike. It reports
// each one's ns per request and the difference in percent.
func BenchmarkCredentialsBound(b *testing.B) {
	tmpl := httptest.NewRequest(http.MethodPost, "/v1/charges", nil)
	bound, err := New(small, Config{})
	if err != nil {
		b.Fatal(err)
	}
	unbound, err := New(small, Config{Credentials: retryfuse.Credentials{Headers: []string{}}})
	if err != nil {
		b.Fatal(err)
	}
	var spent [2]time.Duration
	i := 0
	for b.Loop() {
		i++
		for j := range 2 {
			which := (i + j) % 2
			h := http.Handler(bound)
			if which == 1 {
				h = unbound
			}
			r := benchRequest(tmpl, "key-"+strconv.Itoa(i))
			r.Header["Authorization"] = []string{"Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc"}
			w := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(w, r)
			spent[which] += time.Since(start)
			if w.Code != http.StatusCreated {
				b.Fatalf("status %d", w.Code)
			}
		}
	}
	on, off := float64(spent[0])/float64(i), float64(spent[1])/float64(i)
	b.ReportMetric(on, "ns/bound")
	b.ReportMetric(off, "ns/unbound")
	b.ReportMetric(100*(on-off)/off, "%cost")
}
