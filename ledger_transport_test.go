package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The key ledger seen through http.Client.Do against real loopback servers:
// concurrent duplicates, conflicting bodies, stored results, uncertain writes
// and an unavailable ledger; and through RoundTrip over fake bases: a
// request without a URL and a panicking base.

// doAsync sends req through c on another goroutine; receiveReply waits
// for its reply.
func doAsync(c *http.Client, req *http.Request) <-chan callReply {
	ch := make(chan callReply, 1)
	go func() {
		resp, err := c.Do(req)
		ch <- callReply{resp, err}
	}()
	return ch
}

func TestLedgerConcurrentDuplicatesOneSent(t *testing.T) {
	const callers = 32
	ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
	srv := newOrdersServer(t, always(orderHold))
	client, _ := newLedgerClient(t, ledger, nil)

	reqs := make([]*http.Request, callers)
	for i := range reqs {
		reqs[i] = newKeyedPOST(t, callCtx(t), srv.url(), "order-1", `{"item":"book"}`)
	}
	start := make(chan struct{})
	replies := make(chan callReply, callers)
	for _, req := range reqs {
		go func() {
			<-start
			resp, err := client.Do(req)
			replies <- callReply{resp, err}
		}()
	}
	close(start)

	srv.waitArrived(t, 1)
	// Every duplicate is refused while the first call is held at the server.
	for i := range callers - 1 {
		r := receiveReply(t, replies)
		if r.resp != nil {
			readAndClose(t, r.resp)
			t.Fatalf("duplicate %d: got a response %d, want ErrDuplicateInFlight", i, r.resp.StatusCode)
		}
		require.Truef(t, errors.Is(r.err, ErrDuplicateInFlight), "duplicate %d: got %v, want ErrDuplicateInFlight", i, r.err)
	}
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())

	close(srv.release)
	first := receiveReply(t, replies)
	require.NoError(t, first.err)
	firstBody := readAndClose(t, first.resp)
	require.Equalf(t, http.StatusCreated, first.resp.StatusCode, "got status %d, want 201", first.resp.StatusCode)

	resp, body, err := postKeyed(t, client, srv.url(), "order-1", `{"item":"book"}`)
	require.NoError(t, err)
	assert.Equalf(t, first.resp.StatusCode, resp.StatusCode, "replay: got status %d, want %d", resp.StatusCode, first.resp.StatusCode)
	assert.Equalf(t, first.resp.Header, resp.Header, "replay: got header %v, want %v", resp.Header, first.resp.Header)
	assert.Equalf(t, firstBody, body, "replay: got body %q, want %q", body, firstBody)
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1 (the replay must not send)", srv.posts.Load())
	assert.Equalf(t, 1, srv.effects("order-1"), "got %d effects, want 1", srv.effects("order-1"))
}

func TestLedgerConflictingBodyRefused(t *testing.T) {
	t.Parallel()
	const key = "order-2"
	conflict := func(t *testing.T, client *http.Client, srv *ordersServer) {
		t.Helper()
		before := srv.posts.Load()
		resp, _, err := postKeyed(t, client, srv.url(), key, `{"item":"other"}`)
		require.Nilf(t, resp, "got a response, want ErrIdempotencyConflict")
		assert.Truef(t, errors.Is(err, ErrIdempotencyConflict), "got %v, want ErrIdempotencyConflict", err)
		assert.Equalf(t, before, srv.posts.Load(), "got %d POSTs at the server, want %d: a conflict must not be sent", srv.posts.Load(), before)
	}

	t.Run("in_flight", func(t *testing.T) {
		ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
		srv := newOrdersServer(t, always(orderHold))
		client, _ := newLedgerClient(t, ledger, nil)
		held := doAsync(client, newKeyedPOST(t, callCtx(t), srv.url(), key, `{"item":"book"}`))
		srv.waitArrived(t, 1)
		conflict(t, client, srv)
		close(srv.release)
		r := receiveReply(t, held)
		require.NoError(t, r.err)
		readAndClose(t, r.resp)
	})
	t.Run("completed", func(t *testing.T) {
		ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
		srv := newOrdersServer(t, always(orderApply))
		client, _ := newLedgerClient(t, ledger, nil)
		_, _, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
		require.NoError(t, err)
		conflict(t, client, srv)
	})
	t.Run("uncertain", func(t *testing.T) {
		ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
		srv := newOrdersServer(t, always(orderApplyThenStall))
		client, _ := newLedgerClient(t, ledger, func(tr *Transport) { tr.Retry.AttemptTimeout = heldAttemptTimeout })
		_, _, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
		reconcileErrOf(t, err, key)
		conflict(t, client, srv)
	})
}

func TestLedgerStoredResultReplayed(t *testing.T) {
	cases := []struct {
		name    string
		step    orderStep
		status  int
		read    bool          // read the body before closing it
		timeout time.Duration // AttemptTimeout
	}{
		{"created", orderApply, http.StatusCreated, true, time.Second},
		{"client_error", orderReject, http.StatusUnprocessableEntity, true, 0},
		// A response without content is whole as it comes: closing it
		// unread, as callers do, must not lose the result.
		{"no_content_closed_unread", orderNoContent, http.StatusNoContent, false, 0},
		{"no_content_closed_unread_attempt_timeout", orderNoContent, http.StatusNoContent, false, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
			srv := newOrdersServer(t, always(tc.step))
			client, _ := newLedgerClient(t, ledger, func(tr *Transport) { tr.Retry.AttemptTimeout = tc.timeout })
			first, err := client.Do(newKeyedPOST(t, callCtx(t), srv.url(), "k-"+tc.name, `{"item":"book"}`))
			require.NoError(t, err)
			require.Equalf(t, tc.status, first.StatusCode, "got status %d, want %d", first.StatusCode, tc.status)
			firstBody := ""
			if tc.read {
				firstBody = readAndClose(t, first)
			} else {
				require.NoError(t, first.Body.Close())
			}

			resp, body, err := postKeyed(t, client, srv.url(), "k-"+tc.name, `{"item":"book"}`)
			require.NoErrorf(t, err, "replay: got %v, want the stored result", err)
			assert.Equalf(t, tc.status, resp.StatusCode, "replay: got status %d, want %d", resp.StatusCode, tc.status)
			assert.Equalf(t, first.Header, resp.Header, "replay: got header %v, want %v", resp.Header, first.Header)
			assert.Equalf(t, firstBody, body, "replay: got body %q, want %q", body, firstBody)
			assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
		})
	}
}

func TestLedgerResultNotStoredIsAlreadyApplied(t *testing.T) {
	cases := []struct {
		name   string
		ledger *ledger.Memory
		tune   func(*Transport)
		read   func(io.Reader) error
	}{
		{
			name: "over_transport_max_stored_body",
			tune: func(tr *Transport) { tr.Keys.MaxStoredBody = 8 },
			read: func(r io.Reader) error { _, err := io.ReadAll(r); return err },
		},
		{
			name:   "over_ledger_max_stored_body",
			ledger: &ledger.Memory{MaxStoredBody: 8},
			read:   func(r io.Reader) error { _, err := io.ReadAll(r); return err },
		},
		{
			name: "closed_before_eof",
			read: func(r io.Reader) error { _, err := io.ReadFull(r, make([]byte, 3)); return err },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const key = "order-3"
			ledger, _ := newLedgerOnFakeClock(t, tc.ledger)
			srv := newOrdersServer(t, always(orderApply))
			client, _ := newLedgerClient(t, ledger, tc.tune)
			first, err := client.Do(newKeyedPOST(t, callCtx(t), srv.url(), key, `{"item":"a book with a long title"}`))
			require.NoError(t, err)
			require.NoError(t, tc.read(first.Body))
			require.NoError(t, first.Body.Close())

			resp, _, err := postKeyed(t, client, srv.url(), key, `{"item":"a book with a long title"}`)
			require.Nilf(t, resp, "got a response, want ErrAlreadyApplied")
			assert.Truef(t, errors.Is(err, ErrAlreadyApplied), "got %v, want ErrAlreadyApplied", err)
			assert.Falsef(t, errors.Is(err, ErrReconcileRequired), "got %v: an applied write is not an uncertain one", err)
			assert.Containsf(t, err.Error(), strconv.Quote(key), "the refusal names the key")
			assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
		})
	}
}

func TestLedgerUncertainWriteHoldsKeyUntilTTL(t *testing.T) {
	t.Parallel()
	const (
		key = "order-4"
		ttl = 10 * time.Minute
	)
	ledger, clock := newLedgerOnFakeClock(t, &ledger.Memory{TTL: ttl})
	srv := newOrdersServer(t, firstThenApply(orderApplyThenStall))
	client, _ := newLedgerClientOn(t, clock, ledger, func(tr *Transport) { tr.Retry.AttemptTimeout = heldAttemptTimeout })

	resp, _, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.Nil(t, resp)
	rec := reconcileErrOf(t, err, key)
	assert.Truef(t, errors.Is(rec.Cause, ErrAttemptTimeout), "got Cause %v, want ErrAttemptTimeout", rec.Cause)
	assert.Equalf(t, decide.PhasePostWrite, rec.Phase, "got Phase %v, want post_write", rec.Phase)
	assert.Equalf(t, 1, rec.Attempts, "got Attempts %d, want 1: an uncertain write is never replayed", rec.Attempts)
	assert.Equalf(t, 1, srv.effects(key), "got %d effects, want 1", srv.effects(key))

	for _, advance := range []time.Duration{0, ttl - time.Second} {
		clock.Advance(advance)
		resp, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
		require.Nil(t, resp)
		rec = reconcileErrOf(t, err, key)
		assert.Truef(t, rec.Earlier, "got %v, want a refusal because of the earlier call", rec)
		assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1: a held key must not be sent", srv.posts.Load())
	}

	clock.Advance(time.Second) // the TTL has passed: the key is free
	// Sent through a second Transport sharing the ledger: the POST is
	// answered at once, and a starved handler must not look like a timeout.
	untimed, _ := newLedgerClientOn(t, clock, ledger, nil)
	resp, _, err = postKeyed(t, untimed, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "after the TTL: got %v, want the request sent", err)
	assert.Equalf(t, http.StatusCreated, resp.StatusCode, "got status %d, want 201", resp.StatusCode)
	assert.Equalf(t, int32(2), srv.posts.Load(), "got %d POSTs at the server, want 2", srv.posts.Load())
}

func TestLedgerDefiniteFailureFreesKey(t *testing.T) {
	const key = "order-5"
	ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
	srv := newOrdersServer(t, func(n int) orderStep {
		if n <= 2 {
			return orderUnavailable
		}
		return orderApply
	})
	client, _ := newLedgerClient(t, ledger, func(tr *Transport) { tr.Retry.MaxAttempts = 2 })

	resp, _, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "got %v, want the final 503 as a response", err)
	assert.Equalf(t, http.StatusServiceUnavailable, resp.StatusCode, "got status %d, want 503", resp.StatusCode)
	assert.Equalf(t, int32(2), srv.posts.Load(), "got %d POSTs at the server, want 2", srv.posts.Load())

	resp, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "got %v, want the key free and the request sent", err)
	assert.Equalf(t, http.StatusCreated, resp.StatusCode, "got status %d, want 201", resp.StatusCode)
	assert.Equalf(t, int32(3), srv.posts.Load(), "got %d POSTs at the server, want 3", srv.posts.Load())
}

// brokenLedger cannot be reached.
type brokenLedger struct{ err error }

func (l brokenLedger) Begin(context.Context, string, ledger.Fingerprint) (ledger.Claim, error) {
	return ledger.Claim{}, l.err
}
func (l brokenLedger) Complete(context.Context, string, string, *ledger.StoredResponse) error {
	return l.err
}
func (l brokenLedger) Release(context.Context, string, string) error   { return l.err }
func (l brokenLedger) Uncertain(context.Context, string, string) error { return l.err }

func TestLedgerUnavailableSendsNothing(t *testing.T) {
	down := errors.New("ledger store: connection refused")
	srv := newOrdersServer(t, always(orderApply))
	var (
		mu     sync.Mutex
		events []EvidenceUnavailableInfo
	)
	client, _ := newLedgerClient(t, brokenLedger{down}, func(tr *Transport) {
		tr.Hooks.EvidenceUnavailable = func(i EvidenceUnavailableInfo) {
			mu.Lock()
			events = append(events, i)
			mu.Unlock()
		}
	})

	resp, _, err := postKeyed(t, client, srv.url(), "order-6", `{"item":"book"}`)
	require.Nil(t, resp)
	assert.Truef(t, errors.Is(err, ErrLedgerUnavailable), "got %v, want ErrLedgerUnavailable", err)
	assert.Truef(t, errors.Is(err, down), "got %v, want it to wrap the ledger's error", err)
	assert.Equalf(t, int32(0), srv.posts.Load(), "got %d POSTs at the server, want 0", srv.posts.Load())

	mu.Lock()
	defer mu.Unlock()
	require.Lenf(t, events, 1, "got %d EvidenceUnavailable events, want 1", len(events))
	assert.Equalf(t, "ledger", events[0].Source, "got Source %q, want ledger", events[0].Source)
	assert.Truef(t, errors.Is(events[0].Err, down), "got Err %v, want the ledger's error", events[0].Err)
	assert.Equalf(t, "order-6", events[0].IdempotencyKey, "got key %q, want order-6", events[0].IdempotencyKey)
}

// decisionRecorder records the decision core's verdicts as the hook sees them.
type decisionRecorder struct {
	mu   sync.Mutex
	seen []DecisionInfo
}

func (d *decisionRecorder) hook(i DecisionInfo) {
	d.mu.Lock()
	d.seen = append(d.seen, i)
	d.mu.Unlock()
}

// take returns the verdicts recorded since the last take.
func (d *decisionRecorder) take() []DecisionInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.seen
	d.seen = nil
	return s
}

func TestLedgerDecisionHookShowsKeyState(t *testing.T) {
	const key = "order-7"
	ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
	srv := newOrdersServer(t, always(orderHold))
	var d decisionRecorder
	client, _ := newLedgerClient(t, ledger, func(tr *Transport) { tr.Hooks.Decision = d.hook })

	type want struct {
		ks       decide.KeyState
		decision decide.Decision
		evidence decide.Evidence
		rule     decide.Rule
	}
	check := func(step string, got []DecisionInfo, w want) {
		t.Helper()
		require.Lenf(t, got, 1, "%s: got %d verdicts, want 1", step, len(got))
		g := want{got[0].KeyState, got[0].Verdict.Decision, got[0].Verdict.Evidence, got[0].Verdict.Rule}
		assert.Equalf(t, w, g, "%s: got %v/%v/%v rule %d, want %v/%v/%v rule %d",
			step, g.ks, g.decision, g.evidence, g.rule, w.ks, w.decision, w.evidence, w.rule)
		assert.Equalf(t, key, got[0].IdempotencyKey, "%s: got key %q, want %q", step, got[0].IdempotencyKey, key)
	}

	held := doAsync(client, newKeyedPOST(t, callCtx(t), srv.url(), key, `{"item":"book"}`))
	srv.waitArrived(t, 1)
	assert.Emptyf(t, d.take(), "first call: nothing stops its first attempt, and a replay_safe verdict before it is not reported")

	_, _, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.Truef(t, errors.Is(err, ErrDuplicateInFlight), "got %v, want ErrDuplicateInFlight", err)
	check("duplicate", d.take(), want{decide.KeyInFlight, decide.Brake, decide.EvidencePass, 4})

	_, _, err = postKeyed(t, client, srv.url(), key, `{"item":"other"}`)
	require.Truef(t, errors.Is(err, ErrIdempotencyConflict), "got %v, want ErrIdempotencyConflict", err)
	check("other body", d.take(), want{decide.KeyConflict, decide.RejectConflict, decide.EvidenceFail, 1})

	close(srv.release)
	r := receiveReply(t, held)
	require.NoError(t, r.err)
	readAndClose(t, r.resp)
	assert.Emptyf(t, d.take(), "first call's response: a confirmed result asks the decision core nothing")

	_, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoError(t, err)
	check("replay", d.take(), want{decide.KeyCompleted, decide.ReplayStored, decide.EvidencePass, 2})
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
}
