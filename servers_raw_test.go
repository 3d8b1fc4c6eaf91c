package retryfuse

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
)

// Raw TCP test servers on loopback, for faults that must be exact to the
// byte: a reset after the request, a stalled connection, a refused port.

// rawServer is a loopback TCP server for byte-exact faults: serve is called
// for each accepted connection with its 0-based number.
type rawServer struct {
	ln    net.Listener
	done  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	reqs  []recorded
	open  []net.Conn
	conns int
}

func newRawServer(t *testing.T, serve func(s *rawServer, connNo int, c net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := &rawServer{ln: ln, done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			n := s.conns
			s.conns++
			s.open = append(s.open, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				serve(s, n, c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		close(s.done)
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) URL() string { return "http://" + s.ln.Addr().String() }

// readRequest reads one request and its body from br and records it.
func (s *rawServer) readRequest(br *bufio.Reader) (recorded, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return recorded{}, err
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return recorded{}, err
	}
	rec := recorded{Method: req.Method, URL: req.URL.String(), Header: req.Header, Body: string(body)}
	s.mu.Lock()
	s.reqs = append(s.reqs, rec)
	s.mu.Unlock()
	return rec, nil
}

func (s *rawServer) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func (s *rawServer) connCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// writeResponse writes a complete keep-alive HTTP/1.1 response.
func writeResponse(c net.Conn, status int, body string) error {
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	return err
}

// resetConn closes c with SO_LINGER 0, so that the peer gets an RST.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// stallConn holds c open without answering until the peer closes it or
// the server shuts down.
func (s *rawServer) stallConn(c net.Conn) {
	go func() {
		<-s.done
		_ = c.Close()
	}()
	_, _ = io.Copy(io.Discard, c)
}

// refusedURL returns a loopback URL on which nothing listens: a port is
// bound and released again.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr + "/"
}
