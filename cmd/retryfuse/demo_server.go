package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/hashicorp/go-cleanhttp"
)

// servers starts the demo's loopback servers and closes them all at the end.
type servers struct {
	listen func() (net.Listener, error)
	// dial, when set, connects the clients that transport makes to the
	// listeners listen made (a network in memory, for a test in a
	// testing/synctest bubble); nil: the network's own dialer.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	all  []*httptest.Server
}

// transport returns a pooled base transport whose connections reach the
// servers.
func (s *servers) transport() *http.Transport {
	t := cleanhttp.DefaultPooledTransport()
	if s.dial != nil {
		t.DialContext = s.dial
	}
	return t
}

// start serves h on a new loopback listener.
func (s *servers) start(name string, h http.Handler) (*httptest.Server, error) {
	l, err := s.listen()
	if err != nil {
		return nil, fmt.Errorf("cannot start the %s server: %w", name, err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	srv.Start()
	s.all = append(s.all, srv)
	return srv, nil
}

func (s *servers) close() {
	for _, srv := range s.all {
		srv.CloseClientConnections()
		srv.Close()
	}
}

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// failing answers every request with 503 and counts them.
type failing struct {
	requests   atomic.Int64
	retryAfter string // the Retry-After header to send, if any
}

func (f *failing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	if f.retryAfter != "" {
		w.Header().Set("Retry-After", f.retryAfter)
	}
	http.Error(w, "unavailable", http.StatusServiceUnavailable)
}
