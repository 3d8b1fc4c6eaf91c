package retryfusetest_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/retryfusetest"
)

// The Transport in memory must show a retryfuse Transport above it the
// facts a real wire shows: the same phase, outcome and classification of
// the attempt, the same error class for the call, the same effects. Each
// fault runs once over a Server on a loopback socket (net/http's Transport
// as the base) and once over a Transport, and the two are compared.

// seen is what one call through a retryfuse Transport showed.
type seen struct {
	phase     decide.Phase
	outcome   decide.Outcome
	retryable bool
	status    int
	reconcile bool  // the call ended in a *ReconcileRequiredError
	timeout   bool  // its cause was the attempt timeout
	bodyErr   error // reading the response body
	applied   int   // effects under the key
}

// oneAttempt sends one request with method (keyed when a POST) through a
// retryfuse Transport over base, and reports what it saw. The attempt has a
// timeout only when the fault is a stall: a slow machine must not turn an
// answer into a timeout.
func oneAttempt(t *testing.T, base http.RoundTripper, url, method string, f retryfusetest.Fault, charges *retryfusetest.Recorder) seen {
	t.Helper()
	var timeout time.Duration
	if s := f.String(); strings.Contains(s, "Stall") {
		timeout = 200 * time.Millisecond
	}
	var mu sync.Mutex
	var done []retryfuse.AttemptDoneInfo
	rt := &retryfuse.Transport{Base: base,
		Retry: retryfuse.RetryPolicy{MaxAttempts: 1, AttemptTimeout: timeout},
		Hooks: retryfuse.Hooks{AttemptDone: func(i retryfuse.AttemptDoneInfo) { mu.Lock(); done = append(done, i); mu.Unlock() }}}
	defer rt.CloseIdleConnections()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"amount":1}`)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url+"/charges", body)
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Idempotency-Key", "k")
	}
	resp, err := rt.RoundTrip(req)
	var s seen
	if resp != nil {
		s.status = resp.StatusCode
		_, s.bodyErr = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	s.reconcile = errors.Is(err, retryfuse.ErrReconcileRequired)
	s.timeout = errors.Is(err, retryfuse.ErrAttemptTimeout)
	mu.Lock()
	defer mu.Unlock()
	if len(done) != 1 {
		t.Fatalf("AttemptDone events: got %d, want 1", len(done))
	}
	s.phase, s.outcome, s.retryable = done[0].Phase, done[0].Outcome, done[0].Retryable
	s.applied = charges.Applied("k") + charges.Applied("")
	return s
}

func TestTransportShowsTheFactsOfARealWire(t *testing.T) {
	faults := []retryfusetest.Fault{
		retryfusetest.Answer(),
		retryfusetest.ResetBeforeRead(),
		retryfusetest.ApplyThenReset(),
		retryfusetest.ApplyThenClose(),
		retryfusetest.StallBeforeApply(),
		retryfusetest.ApplyThenStall(),
		retryfusetest.Status(http.StatusServiceUnavailable),
		retryfusetest.Status(http.StatusInternalServerError),
		retryfusetest.RetryAfter(http.StatusTooManyRequests, time.Second),
		retryfusetest.RetryAfterDate(http.StatusServiceUnavailable, time.Second),
		retryfusetest.SlowBody(time.Millisecond),
		retryfusetest.TruncatedBody(1),
	}
	for _, f := range faults {
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			t.Run(f.String()+"/"+method, func(t *testing.T) {
				wireCharges := retryfusetest.NewRecorder()
				srv := retryfusetest.NewServer(t, wireCharges.Wrap(answerOK()), f)
				wire := oneAttempt(t, srv.Client().Transport, srv.URL, method, f, wireCharges)

				memCharges := retryfusetest.NewRecorder()
				mem := oneAttempt(t, retryfusetest.NewTransport(memCharges.Wrap(answerOK()), f), "http://api.test", method, f, memCharges)
				if !sameFacts(wire, mem) {
					t.Errorf("facts differ:\n wire   %+v\n memory %+v", wire, mem)
				}
			})
		}
	}
}

// sameFacts compares what two calls showed; their body errors match by
// io.ErrUnexpectedEOF alone (net/http words its own).
func sameFacts(a, b seen) bool {
	ae, be := errors.Is(a.bodyErr, io.ErrUnexpectedEOF), errors.Is(b.bodyErr, io.ErrUnexpectedEOF)
	a.bodyErr, b.bodyErr = nil, nil
	return a == b && ae == be
}

func answerOK() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "done") })
}

// A refused connection is nothing written: pre_write, as on a port where
// nothing listens.
func TestRefuseIsARefusedConnectionBeforeAnyWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	wire := oneAttempt(t, &http.Transport{}, url, http.MethodPost, retryfusetest.Refuse(), retryfusetest.NewRecorder())

	charges := retryfusetest.NewRecorder()
	mem := oneAttempt(t, retryfusetest.NewTransport(charges.Wrap(nil), retryfusetest.Refuse()), "http://api.test", http.MethodPost, retryfusetest.Refuse(), charges)
	if !sameFacts(wire, mem) {
		t.Errorf("facts differ:\n wire   %+v\n memory %+v", wire, mem)
	}
	if mem.phase != decide.PhasePreWrite || mem.reconcile {
		t.Errorf("Refuse: got phase %v, reconcile %v; want pre_write, no reconcile", mem.phase, mem.reconcile)
	}
}

// An HTTP/2 stream reset before the handler runs shows what a Go HTTP/2
// server's reset shows.
func TestStreamResetShowsWhatAnHTTP2ServerShows(t *testing.T) {
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		t.Run(method, func(t *testing.T) {
			wireCharges := retryfusetest.NewRecorder()
			srv := retryfusetest.NewHTTP2Server(t, wireCharges.Wrap(answerOK()), retryfusetest.StreamReset())
			wire := oneAttempt(t, srv.Client().Transport, srv.URL, method, retryfusetest.StreamReset(), wireCharges)

			memCharges := retryfusetest.NewRecorder()
			mem := oneAttempt(t, retryfusetest.NewTransport(memCharges.Wrap(answerOK()), retryfusetest.StreamReset()), "https://api.test", method, retryfusetest.StreamReset(), memCharges)
			if !sameFacts(wire, mem) {
				t.Errorf("facts differ:\n wire   %+v\n memory %+v", wire, mem)
			}
		})
	}
}
