package retryfuse

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// Servers that misbehave on real loopback sockets, through the fault
// server: the transport's bounds must hold against them.

// readCountingBase is a base RoundTripper that counts, per attempt, the
// bytes read from each response body it hands up.
type readCountingBase struct {
	base http.RoundTripper
	mu   sync.Mutex
	read []*atomic.Int64 // one per response, in order
}

func (b *readCountingBase) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		n := new(atomic.Int64)
		b.mu.Lock()
		b.read = append(b.read, n)
		b.mu.Unlock()
		resp.Body = &readCountingBody{ReadCloser: resp.Body, n: n}
	}
	return resp, err
}

func (b *readCountingBase) CloseIdleConnections() {
	b.base.(interface{ CloseIdleConnections() }).CloseIdleConnections()
}

func (b *readCountingBase) bytesRead() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]int64, len(b.read))
	for i, n := range b.read {
		out[i] = n.Load()
	}
	return out
}

type readCountingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *readCountingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// A 503 whose body never ends is set aside for a retry: the transport
// reads at most MaxDrainBytes of it (one byte more, to see an end), closes
// its connection, and the retry completes. The server's writer stops once
// the connection is gone, having written no more than the drained bytes
// plus what the sockets buffer.
func TestEndlessBodyOnDiscardedAttemptReadOnlyToMaxDrainBytes(t *testing.T) {
	const maxDrain = 1 << 10
	srv := newFaultServer(t, 3*time.Second)
	base := &readCountingBase{base: cleanhttp.DefaultPooledTransport()}
	tr := newTransport(t, nil, &Transport{Base: base, MaxDrainBytes: maxDrain, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	req, err := faultCall{name: "endless", method: http.MethodGet, fault: faultEndlessBody, times: 1, status: http.StatusServiceUnavailable}.request(testCtx(t), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	resp, body, err := do(tr, req)
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("Do: got %v, %q, %v; want 200 ok", resp, body, err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("call took %v, want well under 2s", d)
	}
	read := base.bytesRead()
	if len(read) != 2 {
		t.Fatalf("responses from the base: got %d, want 2", len(read))
	}
	if read[0] > maxDrain+1 {
		t.Errorf("bytes read from the discarded endless body: got %d, want at most %d (MaxDrainBytes+1)", read[0], maxDrain+1)
	}
	// The writer ends once the client has closed the connection; what it
	// managed to write is the drained bytes plus the sockets' buffers
	// (the send buffer is small; the receive buffer a few hundred KiB).
	var written int64
	if !poll(settleBound, func() bool {
		var ended bool
		written, ended = srv.endlessOf("endless")
		return ended
	}) {
		t.Fatalf("the endless body's writer did not stop within %v of the call's end", settleBound)
	}
	if bound := int64(1 << 20); written > bound {
		t.Errorf("bytes the endless body managed to write: got %d, want at most %d", written, bound)
	}
	t.Logf("the server wrote %d bytes of the endless body; the transport read %d", written, read[0])
}

// A Retry-After far beyond any cap (a date in the year 9999) neither
// overflows nor waits: the 503 comes back at once, reported as
// ErrRetryAfterTooLong.
func TestRetryAfterYear9999ReturnsAtOnce(t *testing.T) {
	srv := newFaultServer(t, 3*time.Second)
	var log hookLog
	tr := newTransport(t, nil, &Transport{Hooks: log.hooks()})
	req, err := faultCall{name: "year9999", method: http.MethodGet, fault: faultRetryAfter503, retryAfter: "Fri, 31 Dec 9999 23:59:59 GMT"}.request(testCtx(t), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	resp, _, err := do(tr, req)
	elapsed := time.Since(began)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("Do: got %v, %v; want the 503", resp, err)
	}
	if elapsed > time.Second {
		t.Errorf("call took %v, want the 503 at once", elapsed)
	}
	if got := srv.arrivalsOf("year9999"); got != 1 {
		t.Errorf("attempts that reached the server: got %d, want 1", got)
	}
	if got := log.giveUpReasons(); len(got) != 1 || !errors.Is(got[0], ErrRetryAfterTooLong) {
		t.Errorf("GiveUp reasons: got %v, want [ErrRetryAfterTooLong]", got)
	}
}

// Response headers that never arrive are cut by AttemptTimeout on each
// attempt; the call ends in about MaxAttempts·AttemptTimeout, not at the
// server's leisure.
func TestHeadersThatNeverArriveAreCutByAttemptTimeout(t *testing.T) {
	const (
		attemptTimeout = 100 * time.Millisecond
		attempts       = 2
		backoff        = time.Millisecond
		margin         = 500 * time.Millisecond
	)
	srv := newFaultServer(t, 3*time.Second) // the headers would come after 3s
	tr := newTransport(t, nil, &Transport{MaxAttempts: attempts, AttemptTimeout: attemptTimeout, InitialBackoff: backoff, MaxBackoff: backoff})
	req, err := faultCall{name: "noheaders", method: http.MethodGet, fault: faultSlowHeaders, delay: "1h"}.request(testCtx(t), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, _, err = do(tr, req)
	elapsed := time.Since(began)
	if !errors.Is(err, ErrAttemptTimeout) || !errors.Is(err, ErrAttemptsExhausted) {
		t.Errorf("Do error: got %v, want ErrAttemptsExhausted after ErrAttemptTimeout", err)
	}
	if lo, hi := attempts*attemptTimeout, attempts*(attemptTimeout+backoff)+margin; elapsed < lo || elapsed > hi {
		t.Errorf("call took %v, want between %v and %v", elapsed, lo, hi)
	}
	if got := srv.arrivalsOf("noheaders"); got != attempts {
		t.Errorf("attempts that reached the server: got %d, want %d", got, attempts)
	}
}

// A discarded 503 whose body trickles in, a byte at a time and never ends,
// holds the call only for the drain time: the body is closed and the retry
// goes ahead, although no deadline and no AttemptTimeout are set.
func TestTrickledBodyOnDiscardedAttemptIsCutInTime(t *testing.T) {
	var n atomic.Int32
	done := make(chan struct{})
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			_, _ = io.WriteString(w, "ok")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fl := http.NewResponseController(w)
		for {
			if _, err := w.Write([]byte{'x'}); err != nil || fl.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	defer close(done)
	tr := newTransport(t, newFakeClock(), &Transport{Budget: UnlimitedBudget{}})
	tr.drainTime = 100 * time.Millisecond
	start := time.Now()
	resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Do: got %v, want the retry's 200", err)
	}
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("got %d %q, want 200 \"ok\"", resp.StatusCode, body)
	}
	if took > 5*time.Second {
		t.Errorf("the call took %v: the trickled body was not cut after the drain time", took)
	}
}
