// Command hedge shows a hedged GET: the first request hangs, so after the
// hedge delay retryfuse sends a second copy beside it; the copy answers at
// once and wins, and the first is cancelled.
//
// The server holds its first request until the client gives up on it, and
// answers every later one at once. The Transport's hooks print each branch
// as it starts and ends, and the hedge as it is sent.
//
// Run it with:
//
//	go run ./examples/hedge
package main

import (
	"context"
	"errors"
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
		fmt.Fprintln(os.Stderr, "hedge:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	var received, cancelled atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if received.Add(1) == 1 {
			<-r.Context().Done() // held until the client cancels it
			cancelled.Add(1)
			return
		}
		fmt.Fprint(rw, "hello")
	}))
	defer srv.Close()

	rt := &retryfuse.Transport{
		Hedge: retryfuse.HedgePolicy{
			// One hedge, sent when an attempt has not answered within 50ms.
			// GET, HEAD and OPTIONS are hedged; other methods only when listed
			// in Methods. Each hedge takes a retry from the budget.
			Max:   1,
			Delay: 50 * time.Millisecond,
		},
		Hooks: retryfuse.Hooks{
			AttemptStart: func(i retryfuse.AttemptStartInfo) {
				fmt.Fprintf(w, "attempt %d (branch %d): %s %s\n", i.Attempt, i.Branch, i.Method, i.URL)
			},
			Policy: func(i retryfuse.PolicyInfo) {
				fmt.Fprintf(w, "%s %s: branch %d, no answer after %v\n", i.Policy, i.Action, i.Branch, i.Wait.Round(10*time.Millisecond))
			},
			AttemptDone: func(i retryfuse.AttemptDoneInfo) {
				if i.Err != nil {
					fmt.Fprintf(w, "attempt %d (branch %d): %v\n", i.Attempt, i.Branch, i.Err)
					return
				}
				fmt.Fprintf(w, "attempt %d (branch %d): status %d\n", i.Attempt, i.Branch, i.StatusCode)
			},
		},
	}
	defer rt.CloseIdleConnections()
	client := &http.Client{Transport: rt}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "client got: %s %q\n", resp.Status, body)
	// The server's handler of the first request returns once it sees the
	// cancellation; wait for it before counting.
	for cancelled.Load() == 0 {
		if ctx.Err() != nil {
			return errors.New("the first request was never cancelled")
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Fprintf(w, "server received: %d requests, %d cancelled by the client\n", received.Load(), cancelled.Load())
	return nil
}
