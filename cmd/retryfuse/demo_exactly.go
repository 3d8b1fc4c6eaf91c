package main

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/idempotency"
)

// exactlyResults: the lost-response payment of section 2, with the
// Idempotency-Key middleware in front of the server.
type exactlyResults struct {
	PlainApplied int
	FuseApplied  int
	PlainOutcome string
	FuseOutcome  string
	PlainElapsed time.Duration
	FuseElapsed  time.Duration
	FuseAttempts int  // attempts retryfuse made
	FuseReplayed bool // its answer was the stored response, replayed
}

// runExactly sends the payment of runLost through each side to the same
// server, now behind the middleware (package idempotency, on a
// ledger.Memory): the server runs a key's request once and answers a
// repeat with the stored response. retryfuse is told the server honours
// keys (KeyPolicy.ServerHonours), and trusts it once the middleware's
// marker on a response confirms it: its first keyed call (a session,
// answered at once) does. So it repeats the uncertain write with the same
// key and body instead of asking its caller to reconcile.
func runExactly(srv *servers) (exactlyResults, error) {
	var res exactlyResults
	pay, h := newPayments(20 * lostAttemptTimeout)
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("POST /sessions", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	mw, err := idempotency.New(mux, idempotency.Config{})
	if err != nil {
		return res, err
	}
	s, err := srv.start("idempotent payments", mw)
	if err != nil {
		return res, err
	}
	const plainKey, fuseKey = "order-2001", "order-2002"

	plain := srv.newPlain(lostAttemptTimeout)
	began := time.Now()
	resp, err := plain.do(context.Background(), poster(s.URL+"/payments", plainKey))
	res.PlainElapsed = time.Since(began)
	res.PlainOutcome = describe(resp, err)
	drainClose(resp)
	res.PlainApplied = pay.count(plainKey)

	tr := srv.newFuse(lostAttemptTimeout)
	tr.Keys.ServerHonours = true
	var attempts atomic.Int32
	var replayed atomic.Bool
	tr.Hooks.AttemptDone = func(i retryfuse.AttemptDoneInfo) {
		attempts.Add(1)
		replayed.Store(i.Replayed)
	}
	client := &http.Client{Transport: tr}
	session, err := poster(s.URL+"/sessions", "session-1")(context.Background())
	if err != nil {
		return res, err
	}
	resp, err = client.Do(session) // its marker confirms that the server honours keys
	drainClose(resp)
	if err != nil {
		return res, err
	}
	attempts.Store(0)
	began = time.Now()
	req, err := poster(s.URL+"/payments", fuseKey)(context.Background())
	if err != nil {
		return res, err
	}
	resp, err = client.Do(req)
	res.FuseElapsed = time.Since(began)
	res.FuseOutcome = describe(resp, err)
	drainClose(resp)
	res.FuseApplied = pay.count(fuseKey)
	res.FuseAttempts, res.FuseReplayed = int(attempts.Load()), replayed.Load()
	return res, nil
}
