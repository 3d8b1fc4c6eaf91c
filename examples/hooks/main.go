// Command hooks logs every event retryfuse reports through Hooks, for
// three calls, each with its own call ID:
//
//  1. a GET answered 503 then 200: it is repeated once;
//  2. a GET always answered 503: it runs out of attempts (GiveUp with
//     ErrAttemptsExhausted), and the last 503 comes back as a response;
//  3. a POST with an Idempotency-Key whose connection the server drops
//     after reading it: the charge may have been applied, so it is not
//     repeated. The caller gets a *ReconcileRequiredError.
//
// Hooks run on the caller's goroutine; concurrent calls run them
// concurrently. The other hooks (HiddenResend, BreakerChange,
// EvidenceUnavailable) have nothing to report here.
//
// Run it with:
//
//	go run ./examples/hooks
package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hooks:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	var flaky, down, charges atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /flaky", func(rw http.ResponseWriter, r *http.Request) {
		if flaky.Add(1) == 1 {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /down", func(rw http.ResponseWriter, r *http.Request) {
		down.Add(1)
		rw.WriteHeader(http.StatusServiceUnavailable)
	})
	mux.HandleFunc("POST /charges", func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the charge is applied...
		charges.Add(1)
		conn, _, err := http.NewResponseController(rw).Hijack()
		if err == nil {
			conn.Close() // ...but the response is lost
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	log := func(c retryfuse.CallInfo, event, format string, args ...any) {
		fmt.Fprintf(w, "call %d attempt %d %-13s "+format+"\n", append([]any{c.CallID, c.Attempt, event}, args...)...)
	}
	rt := &retryfuse.Transport{
		Retry: retryfuse.RetryPolicy{
			InitialBackoff: 10 * time.Millisecond,
		},
		Hooks: retryfuse.Hooks{
			AttemptStart: func(i retryfuse.AttemptStartInfo) {
				log(i.CallInfo, "AttemptStart", "%s %s key=%q", i.Method, i.URL, i.IdempotencyKey)
			},
			AttemptDone: func(i retryfuse.AttemptDoneInfo) {
				log(i.CallInfo, "AttemptDone", "status=%d outcome=%s phase=%s retryable=%t err=%v",
					i.StatusCode, i.Outcome, i.Phase, i.Retryable, i.Err)
			},
			Decision: func(i retryfuse.DecisionInfo) {
				log(i.CallInfo, "Decision", "%s (rule %d: %s)", i.Verdict.Decision, i.Verdict.Rule, i.Verdict.Reason)
			},
			Retry: func(i retryfuse.RetryInfo) {
				log(i.CallInfo, "Retry", "in %v (%s)", i.Delay.Round(time.Microsecond), i.Source)
			},
			GiveUp: func(i retryfuse.GiveUpInfo) {
				log(i.CallInfo, "GiveUp", "status=%d reason=%v", i.StatusCode, i.Reason)
			},
			Reconcile: func(i retryfuse.ReconcileInfo) {
				log(i.CallInfo, "Reconcile", "key=%q resolution=%s", i.Err.IdempotencyKey, i.Resolution)
			},
		},
	}
	defer rt.CloseIdleConnections()
	client := &http.Client{Transport: rt}

	for _, path := range []string{"/flaky", "/down"} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		fmt.Fprintf(w, "=> GET %s: %s\n\n", path, resp.Status)
	}

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":4200}`))
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", "pay-7")
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
		return fmt.Errorf("POST /charges: got %s, want a *ReconcileRequiredError", resp.Status)
	}
	var rec *retryfuse.ReconcileRequiredError
	if !errors.As(err, &rec) {
		return fmt.Errorf("POST /charges: got %v, want a *ReconcileRequiredError", err)
	}
	fmt.Fprintf(w, "=> POST /charges: reconcile required: key=%q attempts=%d phase=%s cause=%v\n",
		rec.IdempotencyKey, rec.Attempts, rec.Phase, rec.Cause)
	fmt.Fprintf(w, "server: GET /flaky received %d times, GET /down %d times, POST /charges applied %d time(s)\n",
		flaky.Load(), down.Load(), charges.Load())
	if flaky.Load() != 2 || down.Load() != 3 || charges.Load() != 1 {
		return fmt.Errorf("server: got %d, %d and %d requests, want 2, 3 and 1", flaky.Load(), down.Load(), charges.Load())
	}
	return nil
}
