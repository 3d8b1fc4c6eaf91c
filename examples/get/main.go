// Command get shows a GET that retryfuse repeats after two 503 responses
// until the server answers 200.
//
// The server answers its first request with 503 and Retry-After: 0, its
// second with a bare 503, and every later one with 200. The Transport's
// hooks print each attempt as it starts and ends, and each retry with its
// delay and where the delay came from: the server's Retry-After, or the
// transport's own backoff.
//
// Run it with:
//
//	go run ./examples/get
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "get:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	var received atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch received.Add(1) {
		case 1:
			rw.Header().Set("Retry-After", "0") // "try again now"
			rw.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			rw.WriteHeader(http.StatusServiceUnavailable)
		default:
			fmt.Fprint(rw, "hello")
		}
	}))
	defer srv.Close()

	rt := &retryfuse.Transport{
		Retry: retryfuse.RetryPolicy{
			// Short waits so that the example runs at once; the defaults are
			// 100ms and 10s.
			InitialBackoff: 20 * time.Millisecond,
			MaxBackoff:     200 * time.Millisecond,
		},
		Hooks: retryfuse.Hooks{
			AttemptStart: func(i retryfuse.AttemptStartInfo) {
				fmt.Fprintf(w, "attempt %d: %s %s\n", i.Attempt, i.Method, i.URL)
			},
			AttemptDone: func(i retryfuse.AttemptDoneInfo) {
				fmt.Fprintf(w, "attempt %d: status %d, retryable %t, took %v\n",
					i.Attempt, i.StatusCode, i.Retryable, i.Duration.Round(time.Microsecond))
			},
			Retry: func(i retryfuse.RetryInfo) {
				why := "backoff"
				if i.Source == "retry_after" {
					why = fmt.Sprintf("server's Retry-After %v, plus jitter", i.RetryAfter)
				}
				fmt.Fprintf(w, "retry after attempt %d: waiting %v (%s)\n",
					i.Attempt, i.Delay.Round(time.Microsecond), why)
			},
		},
	}
	defer rt.CloseIdleConnections()
	client := &http.Client{Transport: rt}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/greeting", nil)
	if err != nil {
		return err
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}

	fmt.Fprintf(w, "client got: %s %q after %v\n", resp.Status, body, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(w, "server received: %d requests\n", received.Load())
	if resp.StatusCode != http.StatusOK || received.Load() != 3 {
		return fmt.Errorf("got status %d after %d requests, want 200 after 3", resp.StatusCode, received.Load())
	}
	return nil
}
