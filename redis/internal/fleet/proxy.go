package fleet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the fault proxy between the callers and the servers: it
// reads each request whole, sends it to the servers in turn, and breaks
// some of the exchanges on the way.

// Fault is what the proxy does to one exchange.
type Fault int

const (
	FaultNone        Fault = iota // the request forwarded, its response returned
	Fault503                      // 503 from the proxy; the server never sees the request
	FaultReset                    // forwarded and answered (applied); the caller's connection is reset instead of the response
	FaultStallBefore              // held past the caller's attempt timeout, then forwarded: it arrives late; the connection is closed
	FaultStallAfter               // forwarded and answered; the response is held past the caller's attempt timeout, then the connection is closed
	FaultTruncate                 // forwarded and answered; the caller gets the header and half the body, then the connection is closed
	numFaults
)

var faultNames = [numFaults]string{"none", "503", "reset after the server answered", "stall before forwarding",
	"stall after the server answered", "truncated body"}

func (f Fault) String() string { return faultNames[f] }

// FaultRates are the shares of exchanges given each fault (the rest go
// through), drawn from a seeded generator in the order they arrive.
type FaultRates struct {
	Unavailable, Reset, StallBefore, StallAfter, Truncate float64
	// Stall is how long a stalled exchange is held: longer than the
	// callers' attempt timeout.
	Stall time.Duration
}

// Proxy is a fault proxy on a loopback port.
type Proxy struct {
	ln       net.Listener
	backends []string
	rates    FaultRates
	out      *http.Transport

	mu   sync.Mutex
	rng  *rand.Rand
	live map[net.Conn]struct{}

	next   atomic.Uint64
	counts [numFaults]atomic.Int64
	done   chan struct{}
	wg     sync.WaitGroup
}

// StartProxy starts a proxy to backends (host:port each, in turn).
func StartProxy(backends []string, rates FaultRates, seed uint64) (*Proxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("fleet: a proxy needs at least one backend")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		ln: ln, backends: backends, rates: rates,
		out:  &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second, DisableCompression: true},
		rng:  rand.New(rand.NewPCG(seed, 0x5eed)),
		live: map[net.Conn]struct{}{},
		done: make(chan struct{}),
	}
	p.wg.Go(p.accept)
	return p, nil
}

// URL is the proxy's base URL.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Counts are the exchanges given each fault so far.
func (p *Proxy) Counts() [numFaults]int64 {
	var c [numFaults]int64
	for i := range c {
		c[i] = p.counts[i].Load()
	}
	return c
}

// Close stops the proxy: it closes its listener and every connection,
// cuts the stalls short, and waits for its goroutines.
func (p *Proxy) Close() {
	close(p.done)
	p.ln.Close()
	p.mu.Lock()
	for c := range p.live {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.out.CloseIdleConnections()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		select {
		case <-p.done:
			p.mu.Unlock()
			c.Close()
			return
		default:
		}
		p.live[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() {
			p.serve(c)
			p.mu.Lock()
			delete(p.live, c)
			p.mu.Unlock()
			c.Close()
		})
	}
}

// pick draws the fault of the next exchange.
func (p *Proxy) pick() Fault {
	p.mu.Lock()
	x := p.rng.Float64()
	p.mu.Unlock()
	r := p.rates
	for f, share := range []float64{Fault503: r.Unavailable, FaultReset: r.Reset, FaultStallBefore: r.StallBefore,
		FaultStallAfter: r.StallAfter, FaultTruncate: r.Truncate} {
		if f == int(FaultNone) {
			continue
		}
		if x < share {
			return Fault(f)
		}
		x -= share
	}
	return FaultNone
}

// serve runs the exchanges of one caller's connection, until one of them
// is broken or the connection ends.
func (p *Proxy) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return
		}
		f := p.pick()
		p.counts[f].Add(1)
		switch f {
		case Fault503:
			resp := &http.Response{StatusCode: http.StatusServiceUnavailable, ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": {"text/plain"}}}
			if p.write(c, resp, []byte("the proxy is unavailable")) != nil {
				return
			}
			continue
		case FaultStallBefore:
			if !p.stall() {
				return
			}
		}
		resp, rbody, err := p.forward(req, body)
		if err != nil {
			resp = &http.Response{StatusCode: http.StatusBadGateway, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}}
			rbody = []byte(err.Error())
		}
		switch f {
		case FaultReset:
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close sends RST: the response is lost
			}
			return
		case FaultStallBefore:
			return // the caller gave up long ago
		case FaultStallAfter:
			if p.stall() {
				_ = p.write(c, resp, rbody) // to a caller gone: it fails, or nobody reads it
			}
			return
		case FaultTruncate:
			var buf bytes.Buffer
			_ = p.write(&buf, resp, rbody)
			full := buf.Bytes()
			_, _ = c.Write(full[:len(full)-(len(rbody)+1)/2])
			return
		}
		if p.write(c, resp, rbody) != nil {
			return
		}
	}
}

// stall waits for the stall's length, or until the proxy closes; it
// reports whether it waited all of it.
func (p *Proxy) stall() bool {
	t := time.NewTimer(p.rates.Stall)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.done:
		return false
	}
}

// forward sends req (its body read) to the next backend and reads the
// response whole.
func (p *Proxy) forward(req *http.Request, body []byte) (*http.Response, []byte, error) {
	backend := p.backends[p.next.Add(1)%uint64(len(p.backends))]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, req.Method, "http://"+backend+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for name, values := range req.Header {
		if name != "Connection" && name != "Keep-Alive" {
			out.Header[name] = values
		}
	}
	resp, err := p.out.RoundTrip(out)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	rbody, err := io.ReadAll(resp.Body)
	return resp, rbody, err
}

// write writes resp with body to w, its length given.
func (p *Proxy) write(w io.Writer, resp *http.Response, body []byte) error {
	h := resp.Header.Clone()
	h.Del("Transfer-Encoding")
	h.Del("Connection")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	out := &http.Response{StatusCode: resp.StatusCode, ProtoMajor: 1, ProtoMinor: 1, Header: h,
		ContentLength: int64(len(body)), Body: io.NopCloser(bytes.NewReader(body))}
	return out.Write(w)
}
