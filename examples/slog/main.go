// Command slog shows retryfuse's decisions in a log/slog logger, and a
// second set of hooks counting attempts beside it (JoinHooks).
//
// Three calls against a local server: a GET answered 200 at once, a GET
// answered 503 then 200, and a keyed POST whose server stalls past the
// attempt timeout after it was written. At the logger's Info level the
// first call logs nothing (a first attempt that succeeds logs at Debug
// only), the retry logs at Info, and the POST's reconcile error at Warn.
//
// Run it with:
//
//	go run ./examples/slog
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/sloghooks"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "slog:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	var flaky atomic.Int32
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/flaky":
			if flaky.Add(1) == 1 {
				rw.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		case "/charges": // applies the charge, then never answers
			select {
			case <-r.Context().Done():
			case <-stop:
			}
			return
		}
		_, _ = io.WriteString(rw, "ok")
	}))
	defer srv.Close()
	defer close(stop)

	// Times and durations vary from run to run; leave them out here.
	logger := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "elapsed", "delay", "duration":
				return slog.Attr{}
			}
			return a
		},
	}))
	var attempts atomic.Int32
	counter := retryfuse.Hooks{AttemptDone: func(retryfuse.AttemptDoneInfo) { attempts.Add(1) }}

	tr := &retryfuse.Transport{
		Hooks: retryfuse.JoinHooks(sloghooks.New(logger), counter),
		Retry: retryfuse.RetryPolicy{
			InitialBackoff: 10 * time.Millisecond,
			AttemptTimeout: 200 * time.Millisecond,
		},
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	for _, c := range []struct{ method, path, key string }{
		{http.MethodGet, "/ok", ""},
		{http.MethodGet, "/flaky", ""},
		{http.MethodPost, "/charges", "charge-7"},
	} {
		fmt.Fprintf(w, "== %s %s\n", c.method, c.path)
		req, err := http.NewRequest(c.method, srv.URL+c.path, nil)
		if err != nil {
			return err
		}
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		resp, err := client.Do(req)
		var rec *retryfuse.ReconcileRequiredError
		switch {
		case errors.As(err, &rec):
			fmt.Fprintf(w, "client: reconcile required for key %q\n", rec.IdempotencyKey)
		case err != nil:
			return err
		default:
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			fmt.Fprintf(w, "client: %s\n", resp.Status)
		}
	}
	fmt.Fprintf(w, "attempts counted by a second hook: %d\n", attempts.Load())
	return nil
}
