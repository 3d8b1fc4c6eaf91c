package retryfuse

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A request without a body has no GetBody; its retry must not call it.
func TestRetryRequestWithoutBody(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	tr := &Transport{sleep: func(context.Context, time.Duration) error { return nil }}
	for _, body := range []bool{false, true} {
		n.Store(0)
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if body {
			req.Body = http.NoBody
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("NoBody %v: got error %v, want nil", body, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n.Load() != 2 {
			t.Errorf("NoBody %v: got status %d after %d attempts, want 200 after 2", body, resp.StatusCode, n.Load())
		}
	}
}
