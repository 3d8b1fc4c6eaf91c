package retryfuse

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse/ledger"
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
			return &Transport{Base: cleanhttp.DefaultPooledTransport(), Retry: RetryPolicy{AttemptTimeout: 10 * time.Second}}
		}},
	}
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

// BenchmarkTransportGETPaired sends the same loopback GET through the bare
// base and through the Transport alternately, one of each per iteration,
// and reports each side's mean time and the Transport's overhead in
// percent. Pairing cancels the drift of a shared machine that makes
// separate sub-benchmarks, run one after the other, hard to compare.
func BenchmarkTransportGETPaired(b *testing.B) {
	for _, timeout := range []time.Duration{0, 10 * time.Second} {
		name := "no_timeout"
		if timeout > 0 {
			name = "attempt_timeout"
		}
		b.Run(name, func(b *testing.B) {
			srv := benchServer(b)
			bare := cleanhttp.DefaultPooledTransport()
			fuse := &Transport{Base: cleanhttp.DefaultPooledTransport(), Retry: RetryPolicy{AttemptTimeout: timeout}}
			defer bare.CloseIdleConnections()
			defer fuse.CloseIdleConnections()
			bareClient, fuseClient := &http.Client{Transport: bare}, &http.Client{Transport: fuse}
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			benchGET(b, bareClient, req)
			benchGET(b, fuseClient, req)
			var bareTime, fuseTime time.Duration
			for b.Loop() {
				t0 := time.Now()
				benchGET(b, bareClient, req)
				t1 := time.Now()
				benchGET(b, fuseClient, req)
				bareTime += t1.Sub(t0)
				fuseTime += time.Since(t1)
			}
			n := float64(b.N)
			b.ReportMetric(float64(bareTime.Nanoseconds())/n, "bare-ns/call")
			b.ReportMetric(float64(fuseTime.Nanoseconds())/n, "retryfuse-ns/call")
			b.ReportMetric(100*(float64(fuseTime)/float64(bareTime)-1), "overhead-%")
		})
	}
}

// BenchmarkTransportOverhead measures the Transport's own work per call,
// without a network: the base answers at once. It is what the Transport
// adds to any round trip.
func BenchmarkTransportOverhead(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/x", nil)
	for _, bt := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"base", staticBase{}},
		{"retryfuse", &Transport{Base: staticBase{}}},
		{"retryfuse_timeout", &Transport{Base: staticBase{}, Retry: RetryPolicy{AttemptTimeout: 10 * time.Second}}},
	} {
		b.Run(bt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := bt.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
			}
		})
	}
}

// staticBase answers every request with a 200 at once.
type staticBase struct{}

func (staticBase) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
}

// BenchmarkTransportOverheadKeyedPOST is BenchmarkTransportOverhead for a
// keyed POST whose 16 KiB body the base reads in 512-byte reads, as a
// connection's writer would without a WriterTo: what the Transport adds
// to a write, the body's watcher included.
func BenchmarkTransportOverheadKeyedPOST(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 16<<10)
	for _, bt := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"base", readingBase{}},
		{"retryfuse", &Transport{Base: readingBase{}}},
		{"retryfuse_ledger", &Transport{Base: readingBase{}, Keys: KeyPolicy{Ledger: mustMemoryLedger(b)}}},
	} {
		b.Run(bt.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/orders", bytes.NewReader(body))
				n++
				req.Header.Set("Idempotency-Key", "order-"+strconv.Itoa(n)) // a new key each call: no replay
				resp, err := bt.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
			}
		})
	}
}

func mustMemoryLedger(b *testing.B) *ledger.Memory {
	l, err := newMemoryLedger(&ledger.Memory{})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// readingBase reads the request's body in 512-byte reads, then answers 201.
type readingBase struct{}

func (readingBase) RoundTrip(r *http.Request) (*http.Response, error) {
	var buf [512]byte
	for {
		if _, err := r.Body.Read(buf[:]); err != nil {
			break
		}
	}
	_ = r.Body.Close()
	return &http.Response{StatusCode: http.StatusCreated, Body: http.NoBody, Request: r}, nil
}
