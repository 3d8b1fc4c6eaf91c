package retryfuse

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"strconv"
	"testing"
)

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
			tr := newTransport(t, newFakeClock(), &Transport{MaxAttempts: 3})
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
	tr := newTransport(t, newFakeClock(), &Transport{MaxDrainBytes: 1 << 10})
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

func TestDrainBound(t *testing.T) {
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

// A zero Transport creates its base once, not per call, so that calls
// share its connection pool; CloseIdleConnections reaches that base.
func TestZeroTransportKeepsOneBaseAndForwardsCloseIdleConnections(t *testing.T) {
	srv := newTestServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	tr := &Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	get := func() {
		t.Helper()
		resp, body, err := do(tr, newRequest(t, testCtx(t), http.MethodGet, srv.URL, ""))
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Fatalf("GET: got %v, %q, %v; want 200 \"ok\"", resp, body, err)
		}
	}
	for range 3 {
		get()
	}
	if got := srv.conns.Load(); got != 1 {
		t.Errorf("connections after three calls: got %d, want 1 (one pooled base per Transport)", got)
	}
	tr.CloseIdleConnections()
	get()
	if got := srv.conns.Load(); got != 2 {
		t.Errorf("connections after CloseIdleConnections and one more call: got %d, want 2 (the idle one was closed)", got)
	}
}
