package retryfuse

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// When GetBody fails for a retry, that retry is never sent: the error
// reports the attempts actually made, and its Last is still the last
// attempt's error (with GetBody's beside it), as RetryError documents.
func TestGetBodyFailureReportsTheAttemptsMade(t *testing.T) {
	url := refusedURL(t)
	var log hookLog
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 3, Budget: budget.Unlimited()}, Hooks: log.hooks()})
	errGetBody := errors.New("rv: body source gone")
	var calls atomic.Int32
	req := newRequest(t, testCtx(t), http.MethodPut, url, "payload")
	req.GetBody = func() (io.ReadCloser, error) {
		calls.Add(1)
		return nil, errGetBody
	}
	req.Body = io.NopCloser(strings.NewReader("payload"))

	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("RoundTrip: got %v, nil; want an error", resp)
	}
	var re *RetryError
	if !errors.As(err, &re) {
		t.Fatalf("RoundTrip: got %v, want a *RetryError", err)
	}
	if re.Attempts != 1 {
		t.Errorf("RetryError.Attempts: got %d, want 1 (the retry whose body could not be had was not sent)", re.Attempts)
	}
	for _, want := range []error{ErrNotRepeatable, syscall.ECONNREFUSED, errGetBody} {
		if !errors.Is(err, want) {
			t.Errorf("RoundTrip error %q: does not match %v", err, want)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.giveUps) != 1 || log.giveUps[0].Attempt != 1 {
		t.Errorf("GiveUp events: got %+v, want one about attempt 1", log.giveUps)
	}
}

// A GET made by http.NewRequest with a nil body has no GetBody: its retry
// has no body to replay, and must be sent without one (it used to call the
// nil GetBody and panic).
func TestRetryOfRequestWithoutBody(t *testing.T) {
	for _, body := range []struct {
		name string
		set  func(*http.Request)
	}{
		{"nil", func(r *http.Request) { r.Body = nil }},
		{"NoBody", func(r *http.Request) { r.Body = http.NoBody }},
	} {
		t.Run(body.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				_, _ = w.Write([]byte("ok"))
			}))
			defer srv.Close()
			tr := &Transport{}
			setSleep(tr, func(context.Context, time.Duration) error { return nil })
			req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
			require.NoError(t, err)
			body.set(req)
			require.Nil(t, req.GetBody)

			resp, err := (&http.Client{Transport: tr}).Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, int32(2), n.Load(), "requests the server received")
		})
	}
}

// Each discarded body up to MaxDrainBytes is drained, so that one
// connection serves every attempt; a longer one is closed with its
// connection. The server writes without Content-Length (chunked), where
// the end of the body is seen only by reading past its last byte.
func TestDiscardedBodiesDrainedForConnectionReuse(t *testing.T) {
	tests := []struct {
		size      int
		wantConns int32
	}{
		{0, 1},
		{100, 1},
		{10 << 10, 1},
		{defaultMaxDrainBytes, 1},
		{2 * defaultMaxDrainBytes, 3},
	}
	for _, tt := range tests {
		size := tt.size
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			payload := bytes.Repeat([]byte("x"), size)
			srv := newTestServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				if n < 3 {
					w.WriteHeader(http.StatusServiceUnavailable)
					_, _ = w.Write(payload)
					return
				}
				_, _ = io.WriteString(w, "ok")
			})
			tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxAttempts: 3}})
			resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("Do: got %v, %v; want 200", resp, err)
			}
			if got := srv.count(); got != 3 {
				t.Errorf("requests seen by the server: got %d, want 3", got)
			}
			if got := srv.conns.Load(); got != tt.wantConns {
				t.Errorf("connections: got %d, want %d", got, tt.wantConns)
			}
		})
	}
}

// A discarded body longer than MaxDrainBytes, here one that never ends,
// is closed after the limit: the call goes on, on a new connection.
func TestDiscardedBodyOverDrainLimitDoesNotHang(t *testing.T) {
	srv := newTestServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n > 1 {
			_, _ = io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusServiceUnavailable)
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return // the client closed the connection
			}
		}
	})
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{MaxDrainBytes: 1 << 10}})
	resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
	if err != nil || resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("Do: got %v, %q, %v; want 200 ok", resp, body, err)
	}
	if got := srv.conns.Load(); got != 2 {
		t.Errorf("connections: got %d, want 2 (the endless body's was closed)", got)
	}
}

// readCounter counts the bytes read from it and its Close calls.
type readCounter struct {
	r      io.Reader
	read   int64
	closed bool
}

func (c *readCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += int64(n)
	return n, err
}

func (c *readCounter) Close() error { c.closed = true; return nil }

func TestDrainReadsAtMostOnePastTheLimitAndCloses(t *testing.T) {
	tests := []struct {
		limit, size, wantRead int64
	}{
		{10, 5, 5},
		{10, 10, 10},
		{10, 100, 11}, // one byte past the limit, to see a body's end
		{math.MaxInt64, 100, 100},
		{0, 100, 0},
	}
	for _, tt := range tests {
		body := &readCounter{r: bytes.NewReader(make([]byte, tt.size))}
		drain(&http.Response{Body: body}, tt.limit)
		if body.read != tt.wantRead || !body.closed {
			t.Errorf("drain(limit %d) of %d bytes: read %d, closed %v; want %d, true", tt.limit, tt.size, body.read, body.closed, tt.wantRead)
		}
	}
	drain(nil, 10)                       // no response: nothing to do
	drain(&http.Response{Body: nil}, 10) // no body: nothing to do
}

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
	tr := newTransport(t, nil, &Transport{Base: base, Retry: RetryPolicy{MaxDrainBytes: maxDrain, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
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
	tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}})
	setMaxDrainTime(tr, 100*time.Millisecond)
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
