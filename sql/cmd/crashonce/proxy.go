package main

import (
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// proxy forwards each exchange to the address pick returns (a random
// server, or the downstream), and injects faults:
// a 503 without forwarding, or a response lost after the server answered
// (the client's connection closed), the uncertain write that the
// client's retries must not apply twice.
type proxy struct {
	pick         func(*rand.Rand) string
	f503, fLost  float64
	mu           sync.Mutex
	rand         *rand.Rand
	tr           *http.Transport
	n503, nLost  atomic.Int64
	nUnreachable atomic.Int64
}

func (p *proxy) roll() (float64, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rand.Float64(), p.pick(p.rand)
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x, addr := p.roll()
	if x < p.f503 {
		p.n503.Add(1)
		w.Header().Set("Retry-After", "0")
		http.Error(w, "proxy: injected 503", http.StatusServiceUnavailable)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI, out.URL.Scheme, out.URL.Host = "", "http", addr
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		p.nUnreachable.Add(1)
		hijackClose(w) // the server died: the client sees the connection end
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || x < p.f503+p.fLost {
		if err == nil {
			p.nLost.Add(1)
		}
		hijackClose(w) // the server answered; the client never learns it
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

func hijackClose(w http.ResponseWriter) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not a clean close
		}
		c.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

func newProxy(pick func(*rand.Rand) string, f503, fLost float64, seed uint64) *proxy {
	return &proxy{pick: pick, f503: f503, fLost: fLost, rand: rand.New(rand.NewPCG(seed, 1)),
		tr: &http.Transport{MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: 10 * time.Second}}
}

// faultCounts are the faults a proxy injected or met.
type faultCounts struct{ n503, lost, cut int64 }

func (p *proxy) faults() faultCounts {
	return faultCounts{p.n503.Load(), p.nLost.Load(), p.nUnreachable.Load()}
}
