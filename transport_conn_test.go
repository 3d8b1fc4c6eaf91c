package retryfuse

import (
	"bytes"
	"io"
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
		{DefaultMaxDrainBytes, 1},
		{2 * DefaultMaxDrainBytes, 3},
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
