package retryfuse

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The loopback servers of the hedge and bulkhead tests: each request is
// numbered (or named by its path), and held until the test lets it go.

// branchServer is a loopback server that numbers its requests from 1 and
// answers request n with "reply n" and status 200, unless told otherwise:
// hold(n) makes it wait until let(n), and fail(n) makes it answer 503. A
// held request whose client goes away is reported on canceled.
type branchServer struct {
	*httptest.Server
	arrived  chan int
	canceled chan int
	gone     chan struct{}
	n        atomic.Int32

	mu      sync.Mutex
	release map[int]chan struct{}
	failing map[int]bool
	keys    []string // the Idempotency-Key of each request
}

func newBranchServer(t *testing.T) *branchServer {
	t.Helper()
	s := &branchServer{
		arrived:  make(chan int, 64),
		canceled: make(chan int, 64),
		gone:     make(chan struct{}),
		release:  map[int]chan struct{}{},
		failing:  map[int]bool{},
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.gone) }) // runs first: held handlers return before Close waits for them
	return s
}

func (s *branchServer) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n := int(s.n.Add(1))
	s.mu.Lock()
	ch, failing := s.release[n], s.failing[n]
	s.keys = append(s.keys, r.Header.Get(headerIdempotencyKey))
	s.mu.Unlock()
	s.arrived <- n
	if ch != nil {
		select {
		case <-ch:
		case <-r.Context().Done():
			s.canceled <- n
			return
		case <-s.gone:
			return
		}
	}
	if failing {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = fmt.Fprintf(w, "reply %d", n)
}

func (s *branchServer) hold(ns ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range ns {
		s.release[n] = make(chan struct{})
	}
}

func (s *branchServer) let(n int) {
	s.mu.Lock()
	ch := s.release[n]
	s.mu.Unlock()
	close(ch)
}

func (s *branchServer) fail(ns ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range ns {
		s.failing[n] = true
	}
}

func (s *branchServer) requestKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys)
}

// waitFor waits for n on ch.
func waitFor(t *testing.T, ch <-chan int, want int, what string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s: got request %d, want %d", what, got, want)
		}
	case <-time.After(callWait):
		t.Fatalf("%s: request %d did not come", what, want)
	}
}

// pathServer answers each request with its path, and holds each whose
// path is in held until the test lets it go.
type pathServer struct {
	*httptest.Server
	arrived chan string
	mu      sync.Mutex
	held    map[string]chan struct{}
	gone    chan struct{}
}

func newPathServer(t *testing.T, held ...string) *pathServer {
	t.Helper()
	s := &pathServer{arrived: make(chan string, 64), held: map[string]chan struct{}{}, gone: make(chan struct{})}
	for _, p := range held {
		s.held[p] = make(chan struct{})
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.arrived <- r.URL.Path
		s.mu.Lock()
		ch := s.held[r.URL.Path]
		s.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-s.gone:
				return
			}
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.gone) })
	return s
}

func (s *pathServer) let(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.held[p])
}

func (s *pathServer) next(t *testing.T) string {
	t.Helper()
	select {
	case p := <-s.arrived:
		return p
	case <-time.After(callWait):
		t.Fatal("no request arrived")
		return ""
	}
}
