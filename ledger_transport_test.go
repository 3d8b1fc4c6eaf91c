package retryfuse

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The key ledger seen through http.Client.Do against real loopback servers:
// concurrent duplicates, conflicting bodies, stored results, uncertain writes
// and an unavailable ledger.

func TestLedgerConcurrentDuplicatesOneSent(t *testing.T) {
	const callers = 32
	ledger, _ := lgLedger(t, MemoryLedgerConfig{})
	srv := lgServe(t, lgAlways(lgHold))
	client, _ := lgClient(t, ledger, nil)

	reqs := make([]*http.Request, callers)
	for i := range reqs {
		reqs[i] = lgRequest(t, lgCtx(t), srv.url(), "order-1", `{"item":"book"}`)
	}
	start := make(chan struct{})
	replies := make(chan lgReply, callers)
	for _, req := range reqs {
		go func() {
			<-start
			resp, err := client.Do(req)
			replies <- lgReply{resp, err}
		}()
	}
	close(start)

	srv.waitArrived(t, 1)
	// Every duplicate is refused while the first call is held at the server.
	for i := range callers - 1 {
		r := lgReceive(t, replies)
		if r.resp != nil {
			lgReadAll(t, r.resp)
			t.Fatalf("duplicate %d: got a response %d, want ErrDuplicateInFlight", i, r.resp.StatusCode)
		}
		require.Truef(t, errors.Is(r.err, ErrDuplicateInFlight), "duplicate %d: got %v, want ErrDuplicateInFlight", i, r.err)
	}
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())

	close(srv.release)
	first := lgReceive(t, replies)
	require.NoError(t, first.err)
	firstBody := lgReadAll(t, first.resp)
	require.Equalf(t, http.StatusCreated, first.resp.StatusCode, "got status %d, want 201", first.resp.StatusCode)

	resp, body, err := lgPost(t, client, srv.url(), "order-1", `{"item":"book"}`)
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
	conflict := func(t *testing.T, client *http.Client, srv *lgOrders) {
		t.Helper()
		before := srv.posts.Load()
		resp, _, err := lgPost(t, client, srv.url(), key, `{"item":"other"}`)
		require.Nilf(t, resp, "got a response, want ErrIdempotencyConflict")
		assert.Truef(t, errors.Is(err, ErrIdempotencyConflict), "got %v, want ErrIdempotencyConflict", err)
		assert.Equalf(t, before, srv.posts.Load(), "got %d POSTs at the server, want %d: a conflict must not be sent", srv.posts.Load(), before)
	}

	t.Run("in_flight", func(t *testing.T) {
		ledger, _ := lgLedger(t, MemoryLedgerConfig{})
		srv := lgServe(t, lgAlways(lgHold))
		client, _ := lgClient(t, ledger, nil)
		held := lgGo(client, lgRequest(t, lgCtx(t), srv.url(), key, `{"item":"book"}`))
		srv.waitArrived(t, 1)
		conflict(t, client, srv)
		close(srv.release)
		r := lgReceive(t, held)
		require.NoError(t, r.err)
		lgReadAll(t, r.resp)
	})
	t.Run("completed", func(t *testing.T) {
		ledger, _ := lgLedger(t, MemoryLedgerConfig{})
		srv := lgServe(t, lgAlways(lgApply))
		client, _ := lgClient(t, ledger, nil)
		_, _, err := lgPost(t, client, srv.url(), key, `{"item":"book"}`)
		require.NoError(t, err)
		conflict(t, client, srv)
	})
	t.Run("uncertain", func(t *testing.T) {
		ledger, _ := lgLedger(t, MemoryLedgerConfig{})
		srv := lgServe(t, lgAlways(lgApplyThenStall))
		client, _ := lgClient(t, ledger, func(tr *Transport) { tr.AttemptTimeout = lgAttemptTimeout })
		_, _, err := lgPost(t, client, srv.url(), key, `{"item":"book"}`)
		lgReconcileErr(t, err, key)
		conflict(t, client, srv)
	})
}

func TestLedgerStoredResultReplayed(t *testing.T) {
	cases := []struct {
		name    string
		step    lgStep
		status  int
		read    bool          // read the body before closing it
		timeout time.Duration // AttemptTimeout
	}{
		{"created", lgApply, http.StatusCreated, true, time.Second},
		{"client_error", lgReject, http.StatusUnprocessableEntity, true, 0},
		// A response without content is whole as it comes: closing it
		// unread, as callers do, must not lose the result.
		{"no_content_closed_unread", lgNoContent, http.StatusNoContent, false, 0},
		{"no_content_closed_unread_attempt_timeout", lgNoContent, http.StatusNoContent, false, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ledger, _ := lgLedger(t, MemoryLedgerConfig{})
			srv := lgServe(t, lgAlways(tc.step))
			client, _ := lgClient(t, ledger, func(tr *Transport) { tr.AttemptTimeout = tc.timeout })
			first, err := client.Do(lgRequest(t, lgCtx(t), srv.url(), "k-"+tc.name, `{"item":"book"}`))
			require.NoError(t, err)
			require.Equalf(t, tc.status, first.StatusCode, "got status %d, want %d", first.StatusCode, tc.status)
			firstBody := ""
			if tc.read {
				firstBody = lgReadAll(t, first)
			} else {
				require.NoError(t, first.Body.Close())
			}

			resp, body, err := lgPost(t, client, srv.url(), "k-"+tc.name, `{"item":"book"}`)
			require.NoErrorf(t, err, "replay: got %v, want the stored result", err)
			assert.Equalf(t, tc.status, resp.StatusCode, "replay: got status %d, want %d", resp.StatusCode, tc.status)
			assert.Equalf(t, first.Header, resp.Header, "replay: got header %v, want %v", resp.Header, first.Header)
			assert.Equalf(t, firstBody, body, "replay: got body %q, want %q", body, firstBody)
			assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
		})
	}
}

func TestLedgerResultNotStoredAsksToReconcile(t *testing.T) {
	cases := []struct {
		name   string
		ledger MemoryLedgerConfig
		tune   func(*Transport)
		read   func(io.Reader) error
	}{
		{
			name: "over_transport_max_stored_body",
			tune: func(tr *Transport) { tr.MaxStoredBody = 8 },
			read: func(r io.Reader) error { _, err := io.ReadAll(r); return err },
		},
		{
			name:   "over_ledger_max_stored_body",
			ledger: MemoryLedgerConfig{MaxStoredBody: 8},
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
			ledger, _ := lgLedger(t, tc.ledger)
			srv := lgServe(t, lgAlways(lgApply))
			client, _ := lgClient(t, ledger, tc.tune)
			first, err := client.Do(lgRequest(t, lgCtx(t), srv.url(), key, `{"item":"a book with a long title"}`))
			require.NoError(t, err)
			require.NoError(t, tc.read(first.Body))
			require.NoError(t, first.Body.Close())

			resp, _, err := lgPost(t, client, srv.url(), key, `{"item":"a book with a long title"}`)
			require.Nilf(t, resp, "got a response, want a *ReconcileRequiredError")
			rec := lgReconcileErr(t, err, key)
			assert.Truef(t, errors.Is(rec.Cause, ErrResultNotStored), "got Cause %v, want ErrResultNotStored", rec.Cause)
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
	ledger, clock := lgLedger(t, MemoryLedgerConfig{TTL: ttl})
	srv := lgServe(t, lgFirst(lgApplyThenStall))
	client, _ := lgClient(t, ledger, func(tr *Transport) { tr.AttemptTimeout = lgAttemptTimeout })

	resp, _, err := lgPost(t, client, srv.url(), key, `{"item":"book"}`)
	require.Nil(t, resp)
	rec := lgReconcileErr(t, err, key)
	assert.Truef(t, errors.Is(rec.Cause, ErrAttemptTimeout), "got Cause %v, want ErrAttemptTimeout", rec.Cause)
	assert.Equalf(t, PhasePostWrite, rec.Phase, "got Phase %v, want post_write", rec.Phase)
	assert.Equalf(t, 1, rec.Attempts, "got Attempts %d, want 1: an uncertain write is never replayed", rec.Attempts)
	assert.Equalf(t, 1, srv.effects(key), "got %d effects, want 1", srv.effects(key))

	for _, advance := range []time.Duration{0, ttl - time.Second} {
		clock.Advance(advance)
		resp, _, err = lgPost(t, client, srv.url(), key, `{"item":"book"}`)
		require.Nil(t, resp)
		rec = lgReconcileErr(t, err, key)
		assert.Truef(t, errors.Is(rec.Cause, ErrEarlierUncertain), "got Cause %v, want ErrEarlierUncertain", rec.Cause)
		assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1: a held key must not be sent", srv.posts.Load())
	}

	clock.Advance(time.Second) // the TTL has passed: the key is free
	// Sent through a second Transport sharing the ledger: the POST is
	// answered at once, and a starved handler must not look like a timeout.
	untimed, _ := lgClient(t, ledger, nil)
	resp, _, err = lgPost(t, untimed, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "after the TTL: got %v, want the request sent", err)
	assert.Equalf(t, http.StatusCreated, resp.StatusCode, "got status %d, want 201", resp.StatusCode)
	assert.Equalf(t, int32(2), srv.posts.Load(), "got %d POSTs at the server, want 2", srv.posts.Load())
}

func TestLedgerDefiniteFailureFreesKey(t *testing.T) {
	const key = "order-5"
	ledger, _ := lgLedger(t, MemoryLedgerConfig{})
	srv := lgServe(t, func(n int) lgStep {
		if n <= 2 {
			return lgUnavailable
		}
		return lgApply
	})
	client, _ := lgClient(t, ledger, func(tr *Transport) { tr.MaxAttempts = 2 })

	resp, _, err := lgPost(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "got %v, want the final 503 as a response", err)
	assert.Equalf(t, http.StatusServiceUnavailable, resp.StatusCode, "got status %d, want 503", resp.StatusCode)
	assert.Equalf(t, int32(2), srv.posts.Load(), "got %d POSTs at the server, want 2", srv.posts.Load())

	resp, _, err = lgPost(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "got %v, want the key free and the request sent", err)
	assert.Equalf(t, http.StatusCreated, resp.StatusCode, "got status %d, want 201", resp.StatusCode)
	assert.Equalf(t, int32(3), srv.posts.Load(), "got %d POSTs at the server, want 3", srv.posts.Load())
}

// lgBrokenLedger cannot be reached.
type lgBrokenLedger struct{ err error }

func (l lgBrokenLedger) Begin(context.Context, string, Fingerprint) (LedgerClaim, error) {
	return LedgerClaim{}, l.err
}
func (l lgBrokenLedger) Complete(context.Context, string, string, *StoredResponse) error {
	return l.err
}
func (l lgBrokenLedger) Release(context.Context, string, string) error   { return l.err }
func (l lgBrokenLedger) Uncertain(context.Context, string, string) error { return l.err }

func TestLedgerUnavailableSendsNothing(t *testing.T) {
	down := errors.New("ledger store: connection refused")
	srv := lgServe(t, lgAlways(lgApply))
	var (
		mu     sync.Mutex
		events []EvidenceUnavailableInfo
	)
	client, _ := lgClient(t, lgBrokenLedger{down}, func(tr *Transport) {
		tr.Hooks.EvidenceUnavailable = func(i EvidenceUnavailableInfo) {
			mu.Lock()
			events = append(events, i)
			mu.Unlock()
		}
	})

	resp, _, err := lgPost(t, client, srv.url(), "order-6", `{"item":"book"}`)
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

// lgDecisions records the decision core's verdicts as the hook sees them.
type lgDecisions struct {
	mu   sync.Mutex
	seen []DecisionInfo
}

func (d *lgDecisions) hook(i DecisionInfo) {
	d.mu.Lock()
	d.seen = append(d.seen, i)
	d.mu.Unlock()
}

// take returns the verdicts recorded since the last take.
func (d *lgDecisions) take() []DecisionInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.seen
	d.seen = nil
	return s
}

func TestLedgerDecisionHookShowsKeyState(t *testing.T) {
	const key = "order-7"
	ledger, _ := lgLedger(t, MemoryLedgerConfig{})
	srv := lgServe(t, lgAlways(lgHold))
	var d lgDecisions
	client, _ := lgClient(t, ledger, func(tr *Transport) { tr.Hooks.Decision = d.hook })

	type want struct {
		ks       KeyState
		decision Decision
		evidence Evidence
		rule     int
	}
	check := func(step string, got []DecisionInfo, w want) {
		t.Helper()
		require.Lenf(t, got, 1, "%s: got %d verdicts, want 1", step, len(got))
		g := want{got[0].KeyState, got[0].Verdict.Decision, got[0].Verdict.Evidence, got[0].Verdict.Rule}
		assert.Equalf(t, w, g, "%s: got %v/%v/%v rule %d, want %v/%v/%v rule %d",
			step, g.ks, g.decision, g.evidence, g.rule, w.ks, w.decision, w.evidence, w.rule)
		assert.Equalf(t, key, got[0].IdempotencyKey, "%s: got key %q, want %q", step, got[0].IdempotencyKey, key)
	}

	held := lgGo(client, lgRequest(t, lgCtx(t), srv.url(), key, `{"item":"book"}`))
	srv.waitArrived(t, 1)
	check("first call", d.take(), want{KeyNone, ReplaySafe, EvidencePass, 8})

	_, _, err := lgPost(t, client, srv.url(), key, `{"item":"book"}`)
	require.Truef(t, errors.Is(err, ErrDuplicateInFlight), "got %v, want ErrDuplicateInFlight", err)
	check("duplicate", d.take(), want{KeyInFlight, Brake, EvidencePass, 4})

	_, _, err = lgPost(t, client, srv.url(), key, `{"item":"other"}`)
	require.Truef(t, errors.Is(err, ErrIdempotencyConflict), "got %v, want ErrIdempotencyConflict", err)
	check("other body", d.take(), want{KeyConflict, RejectConflict, EvidenceFail, 1})

	close(srv.release)
	r := lgReceive(t, held)
	require.NoError(t, r.err)
	lgReadAll(t, r.resp)
	check("first call's response", d.take(), want{KeyNone, ReplayStored, EvidencePass, 2})

	_, _, err = lgPost(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoError(t, err)
	check("replay", d.take(), want{KeyCompleted, ReplayStored, EvidencePass, 2})
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
}
