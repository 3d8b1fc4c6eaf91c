package retryfuse

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// The test servers, all on loopback: recording httptest servers and their
// handlers, the orders API of the ledger and reconcile tests, TLS servers
// speaking HTTP/1.1 or HTTP/2, and the httpmock transports that stand in for
// a server. Raw TCP servers for byte-exact faults are in
// servers_raw_test.go, the fault server in servers_fault_test.go.

// recorded is what a test server saw of one request.
type recorded struct {
	Method string
	URL    string
	Header http.Header
	Body   string
}

// testServer is an httptest.Server that records every request (its body
// read in full first) and counts the connections it accepted.
type testServer struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []recorded
	conns atomic.Int32
}

// newTestServer starts a loopback server; h is called with the 1-based
// number of the request, after it was recorded.
func newTestServer(t *testing.T, h func(n int, w http.ResponseWriter, r *http.Request)) *testServer {
	t.Helper()
	s := &testServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, recorded{Method: r.Method, URL: r.URL.String(), Header: r.Header.Clone(), Body: string(body)})
		n := len(s.reqs)
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h(n, w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *testServer) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func (s *testServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// statusServer answers every request with status and body.
func statusServer(t *testing.T, status int, body string) *testServer {
	return newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

// stallUntilGone blocks a handler until its client goes away (or the
// server closes), after the request was recorded: the effect is applied,
// the answer never comes.
func stallUntilGone(_ int, _ http.ResponseWriter, r *http.Request) {
	<-r.Context().Done()
}

// stallingServer is a loopback server that applies its first n
// requests and never answers them (held until the client gives up), and
// answers the others 201 at once.
func stallingServer(t *testing.T, n int) *retryfusetest.Server {
	created := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	// The Recorder reads each body in full, so that a client's hang-up
	// ends the request's context.
	return retryfusetest.NewServer(t, retryfusetest.NewRecorder().Wrap(created), stalls(n)...)
}

// stalls is a script of n requests applied and never answered.
func stalls(n int) []retryfusetest.Fault {
	return slices.Repeat([]retryfusetest.Fault{retryfusetest.ApplyThenStall()}, n)
}

// failThenOK answers 503 to the first fails requests and 200 after.
func failThenOK(fails int) func(int, http.ResponseWriter, *http.Request) {
	return func(n int, w http.ResponseWriter, _ *http.Request) {
		if n <= fails {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "try later")
			return
		}
		_, _ = io.WriteString(w, "done")
	}
}

// statusSequence serves the statuses in turn, then 200.
func statusSequence(t *testing.T, statuses ...int) *httptest.Server {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if i := int(n.Add(1)) - 1; i < len(statuses) {
			w.WriteHeader(statuses[i])
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// settableServer is a loopback server that counts the requests it
// receives and answers each with status (as set by setStatus). A request
// that finds a gate set takes it and waits until it is released.
type settableServer struct {
	*httptest.Server
	requests atomic.Int64
	status   atomic.Int64
	gate     atomic.Pointer[requestGate]
}

// requestGate holds one request: arrived is closed when it is held, and it
// goes on when release is closed.
type requestGate struct{ arrived, release chan struct{} }

// hold makes the next request wait at a gate, and returns the gate.
func (s *settableServer) hold() *requestGate {
	g := &requestGate{arrived: make(chan struct{}), release: make(chan struct{})}
	s.gate.Store(g)
	return g
}

func newSettableServer(t *testing.T, status int) *settableServer {
	t.Helper()
	s := &settableServer{}
	s.status.Store(int64(status))
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if g := s.gate.Swap(nil); g != nil {
			close(g.arrived)
			<-g.release
		}
		w.WriteHeader(int(s.status.Load()))
		_, _ = io.WriteString(w, http.StatusText(int(s.status.Load())))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *settableServer) setStatus(code int) { s.status.Store(int64(code)) }

// orderStep is what the orders server does with one POST.
type orderStep int

const (
	orderApply          orderStep = iota // apply the order, answer 201 with it
	orderApplyThenStall                  // apply it, then never answer: the response is lost
	orderStallNoApply                    // never answer and never apply
	orderUnavailable                     // answer 503 without applying
	orderReject                          // answer 422 without applying
	orderNoContent                       // apply, answer 204 with no body
	orderHold                            // wait for release, then apply and answer 201
)

// ordersServer is a loopback orders API. POST /orders applies an order under
// its Idempotency-Key; script says what to do with the n-th POST (from 1).
// GET /orders?key=K looks an order up: 200 with it, or 404.
type ordersServer struct {
	*httptest.Server
	script  func(n int) orderStep
	posts   atomic.Int32  // POSTs that reached the handler
	gets    atomic.Int32  // lookups that reached the handler
	arrived chan int      // the number of each POST, as it arrives
	release chan struct{} // closed to let held POSTs go on
	gone    chan struct{} // closed at cleanup: stalled handlers return
	getHook func(n int, w http.ResponseWriter) bool

	mu      sync.Mutex
	applied map[string]int    // effects applied, per key
	orders  map[string]string // the order, per key
}

func newOrdersServer(t *testing.T, script func(n int) orderStep) *ordersServer {
	t.Helper()
	s := &ordersServer{
		script:  script,
		arrived: make(chan int, 64),
		release: make(chan struct{}),
		gone:    make(chan struct{}),
		applied: map[string]int{},
		orders:  map[string]string{},
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.gone) }) // runs first: stalled handlers return before Close waits for them
	return s
}

func always(step orderStep) func(int) orderStep { return func(int) orderStep { return step } }

// firstThenApply does step with the first POST and applies every later one.
func firstThenApply(step orderStep) func(int) orderStep {
	return func(n int) orderStep {
		if n == 1 {
			return step
		}
		return orderApply
	}
}

func (s *ordersServer) url() string { return s.URL + "/orders" }

func (s *ordersServer) effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[key]
}

func (s *ordersServer) apply(key, item string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied[key]++
	if _, ok := s.orders[key]; !ok {
		s.orders[key] = fmt.Sprintf(`{"id":"ord-%d","key":%q,"item":%q}`, len(s.orders)+1, key, item)
	}
	return s.orders[key]
}

func (s *ordersServer) stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.gone:
	}
}

func (s *ordersServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body) // read whole, so that a client's hang-up cancels r.Context()
	if r.Method == http.MethodGet {
		n := int(s.gets.Add(1))
		if s.getHook != nil && s.getHook(n, w) {
			return
		}
		s.mu.Lock()
		order, ok := s.orders[r.URL.Query().Get("key")]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, order)
		return
	}
	n := int(s.posts.Add(1))
	s.arrived <- n
	key := r.Header.Get(headerIdempotencyKey)
	switch s.script(n) {
	case orderApplyThenStall:
		s.apply(key, string(body))
		s.stall(r)
		return
	case orderStallNoApply:
		s.stall(r)
		return
	case orderUnavailable:
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	case orderReject:
		w.Header().Set("X-Reason", "item-unknown")
		http.Error(w, `{"error":"unknown item"}`, http.StatusUnprocessableEntity)
		return
	case orderNoContent:
		s.apply(key, string(body))
		w.WriteHeader(http.StatusNoContent)
		return
	case orderHold:
		select {
		case <-s.release:
		case <-s.gone:
			return
		}
	}
	order := s.apply(key, string(body))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Order-Key", key)
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, order)
}

// waitArrived waits for the n-th POST to reach the server.
func (s *ordersServer) waitArrived(t *testing.T, n int) {
	t.Helper()
	for {
		select {
		case got := <-s.arrived:
			if got == n {
				return
			}
		case <-time.After(callWait):
			t.Fatalf("POST number %d never reached the server", n)
		}
	}
}

// benchServer answers every request with 200 and a small body.
func benchServer(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok, a small body")
	}))
	b.Cleanup(srv.Close)
	return srv
}

// httpProto is a protocol a tlsServer speaks, HTTP/1.1 or HTTP/2, and the
// ProtoMajor a request or response over it has.
type httpProto struct {
	name  string
	h2    bool
	major int
}

// httpProtos are the protocols the HTTP/2 tests run over, each in turn.
var httpProtos = []httpProto{{"HTTP/1.1", false, 1}, {"HTTP/2", true, 2}}

// tlsServer is a TLS loopback server that records every request (body
// read in full first), the protocol it came over, and its connections.
type tlsServer struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []recorded
	majors []int
	conns  atomic.Int32
}

// startTLSServer starts a TLS server speaking p, and returns it with a base
// transport that trusts it (a clone of the server's own client transport,
// which attempts HTTP/2 exactly when the server offers it).
func startTLSServer(t *testing.T, p httpProto, h func(n int, w http.ResponseWriter, r *http.Request)) (*tlsServer, *http.Transport) {
	t.Helper()
	s := &tlsServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, recorded{Method: r.Method, URL: r.URL.String(), Header: r.Header.Clone(), Body: string(body)})
		s.majors = append(s.majors, r.ProtoMajor)
		n := len(s.reqs)
		s.mu.Unlock()
		h(n, w, r)
	}))
	s.EnableHTTP2 = p.h2
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	base := s.Client().Transport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	return s, base
}

func (s *tlsServer) requests() ([]recorded, []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...), append([]int(nil), s.majors...)
}

// checkProto fails the test unless every request the server saw, and
// the response if any, came over p.
func checkProto(t *testing.T, p httpProto, s *tlsServer, resp *http.Response) {
	t.Helper()
	if resp != nil && resp.ProtoMajor != p.major {
		t.Errorf("response protocol: got %s, want %s", resp.Proto, p.name)
	}
	_, majors := s.requests()
	for i, m := range majors {
		if m != p.major {
			t.Errorf("request %d reached the server over HTTP/%d, want %s", i+1, m, p.name)
		}
	}
}

const mockURL = "http://api.example.test/items"

// sequenceResponder answers with statuses in turn and then repeats the last.
func sequenceResponder(statuses ...int) httpmock.Responder {
	n := 0
	return func(*http.Request) (*http.Response, error) {
		s := statuses[min(n, len(statuses)-1)]
		n++
		return httpmock.NewStringResponse(s, fmt.Sprintf("answer %d: %d", n, s)), nil
	}
}

// retryAfterMock answers 503 with Retry-After: value(now) once, then 200.
// now is the fake clock's time when the 503 is produced, which is also the
// time at which the transport reads it (the clock moves only in sleep).
func retryAfterMock(clk *fakeClock, value func(now time.Time) string) *httpmock.MockTransport {
	mock := httpmock.NewMockTransport()
	n := 0
	mock.RegisterResponder(http.MethodGet, mockURL, func(*http.Request) (*http.Response, error) {
		n++
		if n > 1 {
			return httpmock.NewStringResponse(200, "ok"), nil
		}
		resp := httpmock.NewStringResponse(503, "busy")
		resp.Header.Set("Retry-After", value(clk.Now()))
		return resp, nil
	})
	return mock
}
