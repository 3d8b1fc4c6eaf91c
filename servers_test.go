package retryfuse

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jarcoal/httpmock"
)

// The test servers, all on loopback: recording httptest servers and their
// handlers, the orders API of the ledger and reconcile tests, TLS servers
// speaking HTTP/1.1 or HTTP/2, raw TCP servers for byte-exact faults, the
// fault server, and the httpmock transports that stand in for a server.

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

// The fault server is a loopback HTTP/1.1 server (127.0.0.1 only) that
// injects a fault per request, chosen by headers the test sets, so that the
// same request always meets the same fault: there is no randomness in it.
// It records the effect of every request that "applies" (a keyed POST
// applies once per arrival that gets that far), so that a test can check
// that no write took effect twice.
//
// Request headers:
//
//	X-Fault              the fault (serverFault); absent means a healthy
//	                     answer
//	X-Fault-Call         the caller's name for the call; its arrivals are
//	                     counted
//	X-Fault-Times        the fault meets only the first n arrivals of the
//	                     call, later ones are answered healthy; absent or 0
//	                     means all
//	X-Fault-Delay        how long faultSlowHeaders waits (a time.Duration;
//	                     default and bound: the server's stall bound)
//	X-Fault-Retry-After  the Retry-After of faultRetryAfter503 (default "0")
//	X-Fault-Status       the status of faultEndlessBody (default 200)

// serverFault names a fault of the fault server.
type serverFault string

const (
	noFault serverFault = ""
	// faultResetBeforeBody resets the connection (RST) once the request's
	// headers are read, before its body: no effect.
	faultResetBeforeBody serverFault = "reset-before-body"
	// faultResetAfterBody reads the body, applies the effect, then resets.
	faultResetAfterBody serverFault = "reset-after-body"
	// faultStall applies the effect, then answers nothing until the client
	// goes away (bounded by the server's stall bound).
	faultStall serverFault = "stall"
	// faultSlowHeaders applies the effect and sends a healthy answer after
	// X-Fault-Delay (cut short when the client goes away).
	faultSlowHeaders serverFault = "slow-headers"
	// faultEndlessBody applies the effect and sends a chunked body that ends
	// only when the client goes away (bounded by endlessBodyCap bytes).
	faultEndlessBody serverFault = "endless-body"
	// faultRetryAfter503 reads the body and answers 503 with Retry-After: no
	// effect.
	faultRetryAfter503 serverFault = "503"
	// faultTruncated applies the effect and sends a response whose
	// Content-Length promises more than is sent, then closes.
	faultTruncated serverFault = "truncated"
	// faultIdleClose applies the effect, answers in full on a keep-alive
	// connection, and closes that connection idleCloseAfter later, while
	// the client holds it idle (or has just sent the next request on it).
	faultIdleClose serverFault = "idle-close"
)

// allFaults is every fault, the healthy answer included.
var allFaults = []serverFault{noFault, faultResetBeforeBody, faultResetAfterBody, faultStall, faultSlowHeaders,
	faultEndlessBody, faultRetryAfter503, faultTruncated, faultIdleClose}

const (
	// endlessBodyCap bounds what an endless body writes, should a client
	// read it for ever.
	endlessBodyCap = 256 << 20
	// endlessSendBuffer is the socket send buffer of a connection that
	// carries an endless body.
	endlessSendBuffer = 32 << 10
	// idleCloseAfter is how long after its answer faultIdleClose closes the
	// connection.
	idleCloseAfter = 10 * time.Millisecond
	// truncatedSent and truncatedPromised are the body bytes a
	// truncated response sends and the Content-Length it declares.
	truncatedSent, truncatedPromised = 10, 1000
)

// faultServer is the fault server. It is safe for concurrent use.
type faultServer struct {
	srv      *httptest.Server
	URL      string
	stallMax time.Duration
	closing  chan struct{}
	stopOnce sync.Once

	open     atomic.Int64 // connections accepted and not yet closed or hijacked
	accepted atomic.Int64

	mu       sync.Mutex
	arrivals map[string]int      // X-Fault-Call → requests seen
	effects  map[string]int      // idempotency key of a POST → effects applied
	injected map[serverFault]int // fault → times injected
	endless  map[string]int64    // X-Fault-Call → bytes an endless body managed to write
	ended    map[string]bool     // X-Fault-Call → its endless body's writer has returned
	timers   map[*time.Timer]struct{}
	handlers sync.WaitGroup // handlers still running
}

type connKey struct{}

// newFaultServer starts a fault server on 127.0.0.1. A stalled handler
// waits at most stallMax. The server is closed when the test ends (closing
// it earlier is allowed).
func newFaultServer(t testing.TB, stallMax time.Duration) *faultServer {
	t.Helper()
	s := &faultServer{
		stallMax: stallMax,
		closing:  make(chan struct{}),
		arrivals: make(map[string]int),
		effects:  make(map[string]int),
		injected: make(map[serverFault]int),
		endless:  make(map[string]int64),
		ended:    make(map[string]bool),
		timers:   make(map[*time.Timer]struct{}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(s.serve)}}
	s.srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
			s.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			// A hijacked connection is the handler's, which closes it
			// before it returns.
			s.open.Add(-1)
		}
	}
	s.srv.Start()
	s.URL = s.srv.URL
	t.Cleanup(s.Close)
	return s
}

// Close stops the server: stalled handlers return, pending idle closes are
// dropped, and every connection is closed. It waits for the handlers.
func (s *faultServer) Close() {
	s.stopOnce.Do(func() {
		close(s.closing)
		s.mu.Lock()
		for tm := range s.timers {
			tm.Stop()
		}
		clear(s.timers)
		s.mu.Unlock()
		s.srv.Close()
		s.handlers.Wait()
	})
}

// openConns is the number of connections the server holds open.
func (s *faultServer) openConns() int64 { return s.open.Load() }

// effectsPerKey returns a copy of the effect count of every key.
func (s *faultServer) effectsPerKey() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.effects))
	for k, v := range s.effects {
		m[k] = v
	}
	return m
}

func (s *faultServer) arrivalsOf(call string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arrivals[call]
}

// endlessOf returns the bytes the endless body of call managed to write
// and whether its writer has returned (the count is known only then).
func (s *faultServer) endlessOf(call string) (written int64, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endless[call], s.ended[call]
}

func (s *faultServer) injectedCounts() map[serverFault]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[serverFault]int, len(s.injected))
	for k, v := range s.injected {
		m[k] = v
	}
	return m
}

// arrive counts the request's arrival and returns the fault it meets.
func (s *faultServer) arrive(r *http.Request) serverFault {
	fault := serverFault(r.Header.Get("X-Fault"))
	call := r.Header.Get("X-Fault-Call")
	times, _ := strconv.Atoi(r.Header.Get("X-Fault-Times"))
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 1
	if call != "" {
		s.arrivals[call]++
		n = s.arrivals[call]
	}
	if times > 0 && n > times {
		fault = noFault
	}
	if fault != noFault {
		s.injected[fault]++
	}
	return fault
}

// apply records the request's effect: a POST with an idempotency key
// applies once per call of apply.
func (s *faultServer) apply(r *http.Request) {
	if r.Method != http.MethodPost {
		return
	}
	key := r.Header.Get(headerIdempotencyKey)
	if key == "" {
		return
	}
	s.mu.Lock()
	s.effects[key]++
	s.mu.Unlock()
}

// wait blocks for d, or until the client goes away or the server closes.
func (s *faultServer) wait(r *http.Request, d time.Duration) {
	tm := time.NewTimer(min(d, s.stallMax))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-r.Context().Done():
	case <-s.closing:
	}
}

func (s *faultServer) serve(w http.ResponseWriter, r *http.Request) {
	s.handlers.Add(1)
	defer s.handlers.Done()
	fault := s.arrive(r)
	if fault == faultResetBeforeBody {
		hijack(w, resetConn)
		return
	}
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return // the client went away mid-body: nothing applies
	}
	if fault != faultRetryAfter503 { // a 503 says the request was not acted on
		s.apply(r)
	}
	switch fault {
	case faultResetAfterBody:
		hijack(w, resetConn)
	case faultStall:
		s.wait(r, s.stallMax)
	case faultSlowHeaders:
		d, err := time.ParseDuration(r.Header.Get("X-Fault-Delay"))
		if err != nil {
			d = s.stallMax
		}
		s.wait(r, d)
		if r.Context().Err() == nil {
			writeOK(w)
		}
	case faultEndlessBody:
		s.writeEndless(w, r)
	case faultRetryAfter503:
		ra := r.Header.Get("X-Fault-Retry-After")
		if ra == "" {
			ra = "0"
		}
		w.Header().Set("Retry-After", ra)
		w.Header().Set("Content-Length", "11")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "unavailable")
	case faultTruncated:
		hijack(w, func(c net.Conn) {
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%0*d",
				truncatedPromised, truncatedSent, 0)
			_ = c.Close()
		})
	case faultIdleClose:
		writeOK(w)
		w.(http.Flusher).Flush()
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			s.closeLater(c)
		}
	default:
		writeOK(w)
	}
}

// closeLater closes c idleCloseAfter from now, unless the server closes
// first.
func (s *faultServer) closeLater(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closing:
		return
	default:
	}
	var tm *time.Timer
	tm = time.AfterFunc(idleCloseAfter, func() {
		s.mu.Lock()
		_, pending := s.timers[tm]
		delete(s.timers, tm)
		s.mu.Unlock()
		if pending {
			_ = c.Close()
		}
	})
	s.timers[tm] = struct{}{}
}

// writeEndless writes a body until the client goes away, counting the
// bytes that the connection accepted.
func (s *faultServer) writeEndless(w http.ResponseWriter, r *http.Request) {
	call := r.Header.Get("X-Fault-Call")
	status, _ := strconv.Atoi(r.Header.Get("X-Fault-Status"))
	if status == 0 {
		status = http.StatusOK
	}
	var written int64
	defer func() {
		s.mu.Lock()
		s.endless[call] += written
		s.ended[call] = true
		s.mu.Unlock()
	}()
	// A small send buffer keeps what the kernel holds for a client that
	// has stopped reading small, so that the count says what the client
	// took, and endless bodies cost little.
	if c, ok := r.Context().Value(connKey{}).(*net.TCPConn); ok {
		_ = c.SetWriteBuffer(endlessSendBuffer)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(status)
	chunk := make([]byte, 32<<10)
	f := w.(http.Flusher)
	for written < endlessBodyCap {
		select {
		case <-s.closing:
			return
		default:
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
		// Flush, so that a write fails as soon as the client is gone and
		// what is counted has left the server's buffer.
		f.Flush()
		if r.Context().Err() != nil {
			return
		}
		written += int64(len(chunk))
	}
}

// hijack takes the connection from the server and hands it to f, which
// must close it.
func hijack(w http.ResponseWriter, f func(net.Conn)) {
	c, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	f(c)
}

func writeOK(w http.ResponseWriter) {
	w.Header().Set("Content-Length", "2")
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "ok")
}

// faultCall describes one request to the fault server.
type faultCall struct {
	name       string // X-Fault-Call
	method     string
	key        string // Idempotency-Key, for a POST
	fault      serverFault
	times      int    // X-Fault-Times
	delay      string // X-Fault-Delay
	retryAfter string // X-Fault-Retry-After
	status     int    // X-Fault-Status
}

// request builds the call's request against base with a replayable body
// for PUT and POST.
func (lc faultCall) request(ctx context.Context, base string) (*http.Request, error) {
	var body io.Reader
	if lc.method == http.MethodPut || lc.method == http.MethodPost {
		body = strings.NewReader("payload of " + lc.name) // sets GetBody
	}
	req, err := http.NewRequestWithContext(ctx, lc.method, base+"/"+lc.name, body)
	if err != nil {
		return nil, err
	}
	h := req.Header
	if lc.name != "" {
		h.Set("X-Fault-Call", lc.name)
	}
	if lc.key != "" {
		h.Set(headerIdempotencyKey, lc.key)
	}
	if lc.fault != noFault {
		h.Set("X-Fault", string(lc.fault))
	}
	if lc.times > 0 {
		h.Set("X-Fault-Times", strconv.Itoa(lc.times))
	}
	if lc.delay != "" {
		h.Set("X-Fault-Delay", lc.delay)
	}
	if lc.retryAfter != "" {
		h.Set("X-Fault-Retry-After", lc.retryAfter)
	}
	if lc.status != 0 {
		h.Set("X-Fault-Status", strconv.Itoa(lc.status))
	}
	return req, nil
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
