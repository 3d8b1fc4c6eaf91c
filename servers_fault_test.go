package retryfuse

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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
