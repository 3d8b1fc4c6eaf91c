package debugpage

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
)

// okBase answers every attempt 200 without a socket.
type okBase struct{}

func (okBase) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r, Header: http.Header{}}, nil
}

// pageOfScopes returns a page watching a Transport that keeps n scopes,
// each with a breaker, a budget, a bulkhead, a rate limiter and a
// throttle, and the last maxEvents give-ups.
func pageOfScopes(b *testing.B, n int) *Page {
	b.Helper()
	brk, err := breaker.New(breaker.Settings{MaxScopes: 2 * n})
	if err != nil {
		b.Fatal(err)
	}
	p := New()
	tr := &retryfuse.Transport{Base: okBase{},
		Brake: retryfuse.BrakePolicy{Breaker: brk},
		Load:  retryfuse.LoadPolicy{MaxInFlight: 64, RateLimit: 1e9},
		Scope: retryfuse.ScopePolicy{Max: 2 * n, Of: func(r *http.Request) string { return "https://api.example.com" + r.URL.Path }},
	}
	hooks := p.Watch("bench", tr)
	tr.Hooks = hooks
	client := &http.Client{Transport: tr}
	for i := range n {
		resp, err := client.Get("http://bench.test/scope/" + strconv.Itoa(i))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	for i := range maxEvents {
		hooks.GiveUp(retryfuse.GiveUpInfo{CallInfo: retryfuse.CallInfo{CallID: uint64(i), Method: "GET", URL: "https://api.example.com/x"},
			Reason: retryfuse.ErrAttemptsExhausted, StatusCode: 503})
	}
	if got := len(tr.Snapshot()); got != n {
		b.Fatalf("the Transport keeps %d scopes, want %d", got, n)
	}
	return p
}

// BenchmarkPage10000Scopes renders the page of a Transport of 10,000
// scopes: the HTML (the 500 most troubled) and the JSON (every scope).
func BenchmarkPage10000Scopes(b *testing.B) {
	p := pageOfScopes(b, 10000)
	for _, c := range []struct{ name, query string }{{"html", ""}, {"json", "?format=json"}} {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/debug/retryfuse"+c.query, nil)
			b.ReportAllocs()
			for b.Loop() {
				w := discard{h: http.Header{}}
				p.ServeHTTP(&w, req)
				if w.n == 0 || w.code != 0 && w.code != http.StatusOK {
					b.Fatalf("status %d, %d bytes", w.code, w.n)
				}
			}
		})
	}
}

// discard is a ResponseWriter that counts the bytes and keeps none.
type discard struct {
	h    http.Header
	code int
	n    int
}

func (d *discard) Header() http.Header  { return d.h }
func (d *discard) WriteHeader(code int) { d.code = code }
func (d *discard) Write(p []byte) (int, error) {
	d.n += len(p)
	return len(p), nil
}

// BenchmarkCallWatched is a successful call's cost over an instant base
// with the page's Hooks installed and without: what mounting the page adds
// to a call (its hooks fire only when a call gives up or leaves a write
// uncertain).
func BenchmarkCallWatched(b *testing.B) {
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:1/x", nil)
	req.RequestURI = ""
	watched := &retryfuse.Transport{Base: okBase{}}
	watched.Hooks = New().Watch("bench", watched)
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"unwatched", &retryfuse.Transport{Base: okBase{}}},
		{"watched", watched},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}
