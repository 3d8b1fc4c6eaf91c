package retryfuse

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// benchTransports are the RoundTrippers compared in one run: the bare base,
// and the Transport over the same kind of base with and without an
// attempt timeout.
func benchTransports() []struct {
	name string
	rt   func() http.RoundTripper
} {
	return []struct {
		name string
		rt   func() http.RoundTripper
	}{
		{"bare", func() http.RoundTripper { return cleanhttp.DefaultPooledTransport() }},
		{"retryfuse", func() http.RoundTripper { return &Transport{Base: cleanhttp.DefaultPooledTransport()} }},
		{"retryfuse_timeout", func() http.RoundTripper {
			return &Transport{Base: cleanhttp.DefaultPooledTransport(), AttemptTimeout: 10 * time.Second}
		}},
	}
}

func benchServer(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok, a small body")
	}))
	b.Cleanup(srv.Close)
	return srv
}

func benchGET(b *testing.B, client *http.Client, req *http.Request) {
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status: got %d, want 200", resp.StatusCode)
	}
}

func closeIdle(rt http.RoundTripper) {
	if ci, ok := rt.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

func BenchmarkTransportGET(b *testing.B) {
	srv := benchServer(b)
	for _, bt := range benchTransports() {
		b.Run(bt.name, func(b *testing.B) {
			rt := bt.rt()
			defer closeIdle(rt)
			client := &http.Client{Transport: rt}
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			benchGET(b, client, req) // warm the connection
			b.ReportAllocs()
			for b.Loop() {
				benchGET(b, client, req)
			}
		})
	}
}

func BenchmarkTransportGETParallel(b *testing.B) {
	srv := benchServer(b)
	for _, bt := range benchTransports() {
		b.Run(bt.name, func(b *testing.B) {
			rt := bt.rt()
			defer closeIdle(rt)
			client := &http.Client{Transport: rt}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				for pb.Next() {
					benchGET(b, client, req)
				}
			})
		})
	}
}
