package retryfusetest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
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
	handler http.Handler
	script  *script
	done    chan struct{}
	once    sync.Once
}

// NewServer starts an HTTP/1.1 Server that serves requests with h (nil:
// 200 OK, an empty body), each meeting the next of faults in order and
// Answer once they are spent. It is closed when tb's test ends.
func NewServer(tb testing.TB, h http.Handler, faults ...Fault) *Server {
	tb.Helper()
	s := newServer(h, faults)
	s.Start()
	tb.Cleanup(s.Close)
	return s
}

// NewHTTP2Server starts a Server that speaks HTTP/2 over TLS; its Client
// trusts its certificate and speaks HTTP/2. It is closed when tb's test
// ends.
func NewHTTP2Server(tb testing.TB, h http.Handler, faults ...Fault) *Server {
	tb.Helper()
	s := newServer(h, faults)
	s.EnableHTTP2 = true
	s.StartTLS()
	tb.Cleanup(s.Close)
	return s
}

func newServer(h http.Handler, faults []Fault) *Server {
	if h == nil {
		h = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	}
	s := &Server{handler: h, script: newScript(faults), done: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	return s
}

// Close releases stalled requests, closes every connection and shuts the
// server down. It may be called more than once.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.done)
		s.CloseClientConnections()
		s.Server.Close()
	})
}

// Met returns the faults the requests met so far, one per request, in
// order (Answer for those past the script).
func (s *Server) Met() []Fault { return s.script.met() }

// Requests returns how many requests reached the server.
func (s *Server) Requests() int { return len(s.script.met()) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	f := s.script.next()
	switch f.kind {
	case refuse, resetBeforeRead:
		resetConn(w)
		return
	case streamReset:
		panic(http.ErrAbortHandler) // HTTP/2: RST_STREAM; HTTP/1: the connection closed
	case stallBeforeApply:
		s.stall(r)
		return
	case retryAfterSeconds, retryAfterDate:
		w.Header().Set("Retry-After", f.retryAfterValue(time.Now()))
		w.WriteHeader(f.status)
		return
	}
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, r) // a panic goes on to net/http, which drops the connection
	switch f.kind {
	case applyThenReset:
		resetConn(w)
		return
	case applyThenClose:
		closeConn(w)
		return
	case applyThenStall:
		s.stall(r)
		return
	}
	body := rec.Body.Bytes()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	if f.kind == slowBody || f.kind == truncatedBody {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(rec.Code)
	switch f.kind {
	case slowBody:
		s.writeSlowly(w, r, body, f.after)
	case truncatedBody:
		if f.n < len(body) {
			_, _ = w.Write(body[:f.n])
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler) // the body ends before its length
		}
		_, _ = w.Write(body)
	default:
		_, _ = w.Write(body)
	}
}

// stall holds r until its client goes or the server closes.
func (s *Server) stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.done:
	}
}

// writeSlowly writes body one byte per interval every.
func (s *Server) writeSlowly(w http.ResponseWriter, r *http.Request, body []byte, every time.Duration) {
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for i := range body {
		timer := time.NewTimer(every)
		select {
		case <-r.Context().Done():
			timer.Stop()
			return
		case <-s.done:
			timer.Stop()
			return
		case <-timer.C:
		}
		if _, err := w.Write(body[i : i+1]); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

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
