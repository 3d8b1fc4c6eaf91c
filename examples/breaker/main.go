// Command breaker shows a breaker.Breaker on a Transport (its
// Brake.Breaker) braking a dependency that fails for a while, then
// recovers.
//
// After 3 failures in a row the scope opens: calls fail fast with a
// *breaker.OpenError and nothing is sent. Once OpenTimeout (100ms here) has
// passed, one probe is let through: while the dependency still fails, the
// probe opens the scope again; once it has recovered, the probe closes it.
// The BreakerChange hook prints each transition.
//
// Run it with:
//
//	go run ./examples/breaker
package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/breaker"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "breaker:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	var down atomic.Bool
	var received atomic.Int32
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		received.Add(1)
		if down.Load() {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()

	brk, err := breaker.New(breaker.Settings{
		FailureThreshold: 3,
		OpenTimeout:      100 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	var transitions, pending []string // pending: printed after the call's own line
	rt := &retryfuse.Transport{
		Brake: retryfuse.BrakePolicy{
			Breaker: brk,
		},
		Retry: retryfuse.RetryPolicy{
			// One attempt per call, so that each call below is one outcome for
			// the breaker. With retries, every attempt counts.
			MaxAttempts: 1,
		},
		Hooks: retryfuse.Hooks{
			BreakerChange: func(i breaker.Change) {
				tr := fmt.Sprintf("%v -> %v", i.From, i.To)
				transitions = append(transitions, tr)
				if i.Cause != nil {
					tr += fmt.Sprintf(" (cause: %v)", i.Cause)
				}
				pending = append(pending, fmt.Sprintf("  breaker %s: %s\n", i.Scope, tr))
			},
		},
	}
	defer rt.CloseIdleConnections()
	client := &http.Client{Transport: rt}

	calls, fastFails := 0, 0
	var lastOpen *breaker.OpenError
	call := func() error {
		calls++
		resp, err := client.Get(srv.URL + "/inventory")
		defer func() {
			for _, line := range pending {
				fmt.Fprint(w, line)
			}
			pending = pending[:0]
		}()
		var open *breaker.OpenError
		switch {
		case errors.As(err, &open):
			fastFails++
			lastOpen = open
			fmt.Fprintf(w, "call %d: not sent: circuit open for %s, opened %v ago, probe allowed %v after opening, cause: %v\n",
				calls, open.Scope, time.Since(open.OpenedAt).Round(time.Microsecond), open.ProbeAt.Sub(open.OpenedAt), open.Cause)
			return nil
		case err != nil:
			return err
		}
		resp.Body.Close()
		fmt.Fprintf(w, "call %d: %s (server has received %d requests)\n", calls, resp.Status, received.Load())
		return nil
	}
	waitForProbe := func() {
		d := time.Until(lastOpen.ProbeAt)
		fmt.Fprintf(w, "waiting %v for the probe\n", d.Round(time.Millisecond))
		time.Sleep(d)
	}

	fmt.Fprintln(w, "the dependency is down")
	for range 4 {
		if err := call(); err != nil {
			return err
		}
	}
	waitForProbe()
	for range 2 {
		if err := call(); err != nil { // the probe fails and opens the scope again
			return err
		}
	}
	down.Store(false)
	fmt.Fprintln(w, "the dependency has recovered")
	waitForProbe()
	for range 2 {
		if err := call(); err != nil { // the probe succeeds and closes the scope
			return err
		}
	}

	fmt.Fprintf(w, "client made %d calls, %d failed fast; the server received %d requests\n", calls, fastFails, received.Load())
	want := []string{"closed -> open", "open -> half_open", "half_open -> open", "open -> half_open", "half_open -> closed"}
	if !slices.Equal(transitions, want) || fastFails != 2 || received.Load() != 6 {
		return fmt.Errorf("got transitions %q, %d fast failures, %d requests received; want %q, 2 and 6",
			transitions, fastFails, received.Load(), want)
	}
	return nil
}
