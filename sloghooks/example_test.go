package sloghooks_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/sloghooks"
)

// The records of a GET that fails once with a 503 and then succeeds, at
// Info: one record, for the retry. A first attempt that succeeds logs only
// at Debug; a reconcile, a give-up or a breaker opening logs at Warn. (The
// handler here keeps a few attributes, for an output that does not change
// from run to run; New's doc lists them all.)
func ExampleNew() {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	keep := map[string]bool{slog.LevelKey: true, slog.MessageKey: true, "attempt": true, "status": true, "decision": true, "delay_source": true}
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if !keep[a.Key] {
				return slog.Attr{}
			}
			return a
		},
	}))
	tr := &retryfuse.Transport{
		Retry: retryfuse.RetryPolicy{InitialBackoff: time.Millisecond},
		Hooks: sloghooks.New(logger),
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		return
	}
	resp.Body.Close()
	// Output:
	// level=INFO msg="retryfuse: retry" attempt=1 delay_source=backoff status=503
}
