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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is the one virtual clock of the tests, for the seams of the
// Transport (now, sleep), the Breaker, the budgets and the MemoryLedger. It
// stands still until Sleep or Advance moves it; every delay Sleep is asked
// for is recorded. It is safe for concurrent use.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
	// onSleep, when set, runs at the start of every Sleep (to cancel a
	// context mid-wait, for instance).
	onSleep func(d time.Duration)
}

// newFakeClock returns a clock that starts at the real time, so that real
// context deadlines compare sensibly with it.
func newFakeClock() *fakeClock { return newFakeClockAt(time.Now()) }

// newFakeClockAt returns a clock that starts at start.
func newFakeClockAt(start time.Time) *fakeClock { return &fakeClock{t: start} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Sleep records d and advances the clock by it; it returns ctx.Err() at
// once, without advancing, when ctx is done.
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	hook := c.onSleep
	c.mu.Unlock()
	if hook != nil {
		hook(d)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// Sleeps returns the delays requested so far.
func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

// install sets the clock as tr's now and sleep seams.
func (c *fakeClock) install(tr *Transport) {
	tr.now = c.Now
	tr.sleep = c.Sleep
}

// newTransport completes tr for a test: the fake clock's seams, a
// deterministic jitter (half the ceiling) unless tr sets its own, and the
// closing of its idle connections when the test ends.
func newTransport(t *testing.T, clk *fakeClock, tr *Transport) *Transport {
	t.Helper()
	if clk != nil {
		clk.install(tr)
	}
	if tr.randN == nil {
		tr.randN = func(n int64) int64 { return n / 2 }
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// testCtx returns a context cancelled when the test ends. It has no
// deadline: a deadline changes what the transport decides, so the tests
// that need one set it themselves.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// do sends req through an http.Client over rt, as a user would, and reads
// and closes the body of any response.
func do(rt http.RoundTripper, req *http.Request) (*http.Response, []byte, error) {
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return resp, nil, err
	}
	body, rerr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if rerr != nil {
		return resp, body, fmt.Errorf("reading the response body: %w", rerr)
	}
	return resp, body, nil
}

func newRequest(t *testing.T, ctx context.Context, method, url, body string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body) // sets GetBody
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	return req
}

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

// countingBody is a request body that counts its Close calls.
type countingBody struct {
	r      io.Reader
	closes atomic.Int32
	once   sync.Once
	closed chan struct{} // closed on the first Close
}

func (b *countingBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *countingBody) Close() error {
	b.closes.Add(1)
	b.once.Do(func() { close(b.closed) })
	return nil
}

// bodies hands out counting bodies of the same content: the request's own
// and every one GetBody returns.
type bodies struct {
	content string
	mu      sync.Mutex
	all     []*countingBody
}

func (bs *bodies) next() *countingBody {
	b := &countingBody{r: strings.NewReader(bs.content), closed: make(chan struct{})}
	bs.mu.Lock()
	bs.all = append(bs.all, b)
	bs.mu.Unlock()
	return b
}

// attach gives req a counting body, and a GetBody with counting bodies
// when replayable is true.
func (bs *bodies) attach(req *http.Request, replayable bool) {
	req.Body = bs.next()
	req.ContentLength = int64(len(bs.content))
	req.GetBody = nil
	if replayable {
		req.GetBody = func() (io.ReadCloser, error) { return bs.next(), nil }
	}
}

// unclosed returns how many of the bodies handed out are not closed
// within closeWait. A RoundTripper may close a body on another goroutine
// after it returned (net/http's write loop does), so each is awaited.
func (bs *bodies) unclosed() (unclosed, total int) {
	bs.mu.Lock()
	all := slices.Clone(bs.all)
	bs.mu.Unlock()
	deadline := time.NewTimer(closeWait)
	defer deadline.Stop()
	expired := false
	for _, b := range all {
		if expired {
			select {
			case <-b.closed:
			default:
				unclosed++
			}
			continue
		}
		select {
		case <-b.closed:
		case <-deadline.C:
			expired = true
			unclosed++
		}
	}
	return unclosed, len(all)
}

// closeWait bounds the wait for a request body to be closed.
const closeWait = 5 * time.Second

// hookLog records every hook event, in order, safe for concurrent use.
type hookLog struct {
	mu         sync.Mutex
	starts     []AttemptStartInfo
	dones      []AttemptDoneInfo
	decisions  []DecisionInfo
	retries    []RetryInfo
	reconciles []ReconcileInfo
	giveUps    []GiveUpInfo
	hidden     []HiddenResendInfo
	callIDs    []uint64 // the CallID of every event, in order
}

func record[T any](l *hookLog, dst *[]T, id func(T) uint64) func(T) {
	return func(v T) {
		l.mu.Lock()
		defer l.mu.Unlock()
		*dst = append(*dst, v)
		l.callIDs = append(l.callIDs, id(v))
	}
}

func (l *hookLog) hooks() Hooks {
	return Hooks{
		AttemptStart: record(l, &l.starts, func(v AttemptStartInfo) uint64 { return v.CallID }),
		AttemptDone:  record(l, &l.dones, func(v AttemptDoneInfo) uint64 { return v.CallID }),
		Decision:     record(l, &l.decisions, func(v DecisionInfo) uint64 { return v.CallID }),
		Retry:        record(l, &l.retries, func(v RetryInfo) uint64 { return v.CallID }),
		Reconcile:    record(l, &l.reconciles, func(v ReconcileInfo) uint64 { return v.CallID }),
		GiveUp:       record(l, &l.giveUps, func(v GiveUpInfo) uint64 { return v.CallID }),
		HiddenResend: record(l, &l.hidden, func(v HiddenResendInfo) uint64 { return v.CallID }),
	}
}

func (l *hookLog) giveUpReasons() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rs []error
	for _, g := range l.giveUps {
		rs = append(rs, g.Reason)
	}
	return rs
}

// always503 is a base that answers every request with a 503, without a
// network.
func always503() http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
			Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	})
}

// roundTripFunc adapts a function to an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// panicBase answers 503 while status is 503, 200 while it is 200, and
// panics (after counting the request as received) while it is 0.
type panicBase struct {
	status atomic.Int32
	seen   atomic.Int32
}

func (b *panicBase) RoundTrip(r *http.Request) (*http.Response, error) {
	b.seen.Add(1)
	st := int(b.status.Load())
	if st == 0 {
		panic("rv: base RoundTripper panics")
	}
	return &http.Response{StatusCode: st, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// roundTripPanics calls rt.RoundTrip(req) and reports whether it panicked;
// the panic must reach the caller, never be swallowed.
func roundTripPanics(rt http.RoundTripper, req *http.Request) (panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	resp, err := rt.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return false
}
