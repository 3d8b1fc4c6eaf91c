package retryfuse

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
			tr := &Transport{sleep: func(context.Context, time.Duration) error { return nil }}
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
