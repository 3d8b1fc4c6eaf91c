package retryfusetest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Server is a real HTTP server on a loopback socket whose requests meet
// the faults of a script, for tests whose behaviour depends on the wire:
// net/http's own re-sends, connection reuse, HTTP/2. A reset is a TCP RST
// (SO_LINGER 0) on HTTP/1 and an RST_STREAM with INTERNAL_ERROR on HTTP/2.
// Its sockets' goroutines block on real I/O, which a testing/synctest
// bubble does not count as durably blocked: inside a bubble, use a
// Transport.
//
// It embeds the *httptest.Server it runs on (URL, Client, Certificate).
// It is closed when the test ends; a stalled request is released then.
// This type is concurrency safe.
type Server struct {
	*httptest.Server
	faults *Handler
	once   sync.Once
}

// NewServer starts an HTTP/1.1 Server that serves requests with h (nil:
// 200 OK, an empty body), each meeting the next of faults in order and
// Answer once they are spent. It is closed when tb's test ends; with a
// nil tb (in an Example), close it yourself.
func NewServer(tb testing.TB, h http.Handler, faults ...Fault) *Server {
	s := newServer(h, faults)
	s.Start()
	if tb != nil {
		tb.Cleanup(s.Close)
	}
	return s
}

// NewHTTP2Server starts a Server that speaks HTTP/2 over TLS; its Client
// trusts its certificate and speaks HTTP/2. It is closed when tb's test
// ends; with a nil tb, close it yourself.
func NewHTTP2Server(tb testing.TB, h http.Handler, faults ...Fault) *Server {
	s := newServer(h, faults)
	s.EnableHTTP2 = true
	s.StartTLS()
	if tb != nil {
		tb.Cleanup(s.Close)
	}
	return s
}

func newServer(h http.Handler, faults []Fault) *Server {
	fh := NewHandler(h, faults...)
	fh.wire, fh.done = true, make(chan struct{})
	s := &Server{faults: fh}
	s.Server = httptest.NewUnstartedServer(fh)
	return s
}

// Close releases stalled requests, closes every connection and shuts the
// server down. It may be called more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.faults.done)
		s.CloseClientConnections()
		s.Server.Close()
	})
}

// Met returns the faults the requests met so far, one per request, in
// order (Answer for those past the script).
func (s *Server) Met() []Fault { return s.faults.Met() }

// Requests returns how many requests reached the server.
func (s *Server) Requests() int { return s.faults.Requests() }

// resetConn resets the connection of w: a TCP RST on HTTP/1, the stream
// reset on HTTP/2 (which has no hijacking).
func resetConn(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// closeConn closes the connection of w in order (a FIN) on HTTP/1, and
// resets the stream on HTTP/2.
func closeConn(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = c.Close()
}
