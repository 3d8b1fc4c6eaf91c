package retryfuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Reconciler seen through http.Client.Do: a write whose response was
// lost on a real loopback connection, looked up by its idempotency key.

// plainClient is a client without retryfuse, for lookups.
func plainClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// lookupReconciler is a Reconciler that looks the order up with GET
// /orders?key=K through *c: applied with the order (200), not applied when
// there is none (404), an error otherwise. calls counts its uses.
func lookupReconciler(c **http.Client, srv *ordersServer, calls *atomic.Int32) Reconciler {
	return Reconciler(func(ctx context.Context, e *ReconcileRequiredError) (*http.Response, bool, error) {
		calls.Add(1)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.url()+"?key="+url.QueryEscape(e.IdempotencyKey), nil)
		if err != nil {
			return nil, false, err
		}
		resp, err := (*c).Do(req)
		if err != nil {
			return nil, false, err
		}
		switch resp.StatusCode {
		case http.StatusOK:
			return resp, true, nil
		case http.StatusNotFound:
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			return nil, false, nil
		}
		_ = resp.Body.Close()
		return nil, false, fmt.Errorf("order lookup: status %d", resp.StatusCode)
	})
}

// reconcileRecorder records the Reconcile hook.
type reconcileRecorder struct {
	mu   sync.Mutex
	seen []ReconcileInfo
}

func (r *reconcileRecorder) hook(i ReconcileInfo) {
	r.mu.Lock()
	r.seen = append(r.seen, i)
	r.mu.Unlock()
}

// one asserts that the hook fired once, with res, and returns the event.
func (r *reconcileRecorder) one(t *testing.T, res string) ReconcileInfo {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Lenf(t, r.seen, 1, "got %d Reconcile events, want 1", len(r.seen))
	got := r.seen[0]
	assert.Equalf(t, res, got.Resolution, "got Resolution %q, want %q", got.Resolution, res)
	require.NotNil(t, got.Err, "got a Reconcile event without its error")
	return got
}

func TestReconcilerAppliedReturnsAuthoritativeResponse(t *testing.T) {
	t.Parallel()
	const key = "order-10"
	ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
	srv := newOrdersServer(t, always(orderApplyThenStall))
	lookups := plainClient(t)
	var calls atomic.Int32
	var hooks reconcileRecorder
	client, _ := newLedgerClient(t, ledger, func(tr *Transport) {
		tr.Retry.AttemptTimeout = heldAttemptTimeout
		tr.Keys.Reconciler = lookupReconciler(&lookups, srv, &calls)
		tr.Hooks.Reconcile = hooks.hook
	})

	resp, body, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "got %v, want the reconciled response", err)
	assert.Equalf(t, http.StatusOK, resp.StatusCode, "got status %d, want the lookup's 200", resp.StatusCode)
	assert.Containsf(t, body, `"key":"`+key+`"`, "got body %q, want the order looked up by key", body)
	assert.Equalf(t, 1, srv.effects(key), "got %d effects, want 1", srv.effects(key))
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1: an uncertain write is never replayed", srv.posts.Load())
	assert.Equalf(t, int32(1), calls.Load(), "got %d reconciler calls, want 1", calls.Load())
	ev := hooks.one(t, resolutionApplied)
	assert.Equalf(t, key, ev.Err.IdempotencyKey, "got key %q in the hook, want %q", ev.Err.IdempotencyKey, key)

	// The reconciliation completed the key, but the lookup's response is not
	// the write's own answer: it is not replayed as if it were. A later call
	// under the key is not sent; it is told the write was applied.
	_, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	assert.ErrorIsf(t, err, ErrAlreadyApplied, "again: got %v, want ErrAlreadyApplied", err)
	assert.NotErrorIsf(t, err, ErrReconcileRequired, "again: got %v: the write is known applied, not uncertain", err)
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
}

func TestReconcilerNotAppliedSendsAgain(t *testing.T) {
	t.Parallel()
	const key = "order-11"
	ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
	srv := newOrdersServer(t, firstThenApply(orderStallNoApply))
	lookups := plainClient(t)
	var calls atomic.Int32
	var hooks reconcileRecorder
	client, _ := newLedgerClient(t, ledger, func(tr *Transport) {
		tr.Retry.AttemptTimeout = heldAttemptTimeout
		tr.Keys.Reconciler = lookupReconciler(&lookups, srv, &calls)
		tr.Hooks.Reconcile = hooks.hook
	})

	resp, body, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	require.NoErrorf(t, err, "got %v, want the request sent again and answered", err)
	assert.Equalf(t, http.StatusCreated, resp.StatusCode, "got status %d, want 201", resp.StatusCode)
	assert.Containsf(t, body, `"key":"`+key+`"`, "got body %q, want the order", body)
	assert.Equalf(t, int32(2), srv.posts.Load(), "got %d POSTs at the server, want 2", srv.posts.Load())
	assert.Equalf(t, 1, srv.effects(key), "got %d effects, want 1", srv.effects(key))
	assert.Equalf(t, int32(1), calls.Load(), "got %d reconciler calls, want 1", calls.Load())
	hooks.one(t, resolutionNotApplied)
}

// strayBody reports whether it was closed.
type strayBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *strayBody) Close() error { b.closed.Store(true); return nil }

func TestReconcilerUnresolvedReturnsReconcileError(t *testing.T) {
	t.Parallel()
	type answer func(stray *strayBody) (*http.Response, bool, error)
	cases := []struct {
		name        string
		answer      answer
		closesStray bool // the transport must close the response it is given
	}{
		{"error", func(*strayBody) (*http.Response, bool, error) {
			return nil, false, errors.New("cannot tell")
		}, false},
		{"error_with_applied_response", func(stray *strayBody) (*http.Response, bool, error) {
			return &http.Response{StatusCode: 200, Body: stray}, true, errors.New("lookup failed")
		}, true},
		{"panic", func(*strayBody) (*http.Response, bool, error) {
			panic("reconciler bug")
		}, false},
		{"applied_without_response", func(*strayBody) (*http.Response, bool, error) {
			return nil, true, nil
		}, false},
		{"response_without_applied", func(stray *strayBody) (*http.Response, bool, error) {
			return &http.Response{StatusCode: 200, Body: stray}, false, nil
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const key = "order-12"
			stray := &strayBody{Reader: strings.NewReader("not the caller's")}
			ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
			srv := newOrdersServer(t, always(orderApplyThenStall))
			var calls atomic.Int32
			var hooks reconcileRecorder
			client, _ := newLedgerClient(t, ledger, func(tr *Transport) {
				tr.Retry.AttemptTimeout = heldAttemptTimeout
				tr.Keys.Reconciler = Reconciler(func(context.Context, *ReconcileRequiredError) (*http.Response, bool, error) {
					calls.Add(1)
					return tc.answer(stray)
				})
				tr.Hooks.Reconcile = hooks.hook
			})

			resp, _, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
			require.Nilf(t, resp, "got a response, want a *ReconcileRequiredError")
			rec := reconcileErrOf(t, err, key)
			assert.Truef(t, errors.Is(rec.Cause, ErrAttemptTimeout), "got Cause %v, want ErrAttemptTimeout", rec.Cause)
			assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
			assert.Equalf(t, int32(1), calls.Load(), "got %d reconciler calls, want 1", calls.Load())
			hooks.one(t, resolutionUnknown)
			if tc.closesStray {
				assert.True(t, stray.closed.Load(), "the response of an unresolved reconciliation was not closed")
			}

			// The key stays held as uncertain: never a replay.
			resp, _, err = postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
			require.Nil(t, resp)
			rec = reconcileErrOf(t, err, key)
			assert.Truef(t, rec.Earlier, "got %v, want a refusal because of the earlier call", rec)
			assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
		})
	}
}

func TestReconcilerBoundByCallerDeadline(t *testing.T) {
	t.Parallel()
	const (
		key      = "order-13"
		deadline = 4 * heldAttemptTimeout
	)
	srv := newOrdersServer(t, always(orderApplyThenStall))
	var (
		ctxErr      error
		hadDeadline bool
		escaped     atomic.Bool
	)
	var hooks reconcileRecorder
	client, _ := newLedgerClient(t, nil, func(tr *Transport) {
		tr.Retry.AttemptTimeout = heldAttemptTimeout
		tr.Keys.Reconciler = Reconciler(func(ctx context.Context, _ *ReconcileRequiredError) (*http.Response, bool, error) {
			_, hadDeadline = ctx.Deadline()
			select {
			case <-ctx.Done():
				ctxErr = ctx.Err()
				return nil, false, ctxErr
			case <-time.After(callWait):
				escaped.Store(true)
				return nil, false, errors.New("cannot tell")
			}
		})
		tr.Hooks.Reconcile = hooks.hook
	})

	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	began := time.Now()
	resp, err := client.Do(newKeyedPOST(t, ctx, srv.url(), key, `{"item":"book"}`))
	elapsed := time.Since(began)
	if resp != nil {
		readAndClose(t, resp)
	}
	require.Nil(t, resp)
	reconcileErrOf(t, err, key)
	assert.False(t, escaped.Load(), "the reconciler outlived the caller's deadline")
	assert.True(t, hadDeadline, "the reconciler's context has no deadline, want the caller's")
	assert.Truef(t, errors.Is(ctxErr, context.DeadlineExceeded), "the reconciler's context ended with %v, want context.DeadlineExceeded", ctxErr)
	assert.Lessf(t, elapsed, callWait/2, "the call took %v, want it to end at the caller's deadline (%v)", elapsed, deadline)
	hooks.one(t, resolutionUnknown)
}

func TestReconcilerLookupThroughSameClient(t *testing.T) {
	t.Parallel()
	const key = "order-14"
	ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
	srv := newOrdersServer(t, always(orderApplyThenStall))
	// The first lookup meets a 503: the Transport must repeat it as a call
	// of its own, not pass it through as part of the POST.
	srv.getHook = func(n int, w http.ResponseWriter) bool {
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	type start struct {
		call    uint64
		method  string
		attempt int
	}
	var (
		mu     sync.Mutex
		starts []start
		calls  atomic.Int32
		client *http.Client
	)
	var hooks reconcileRecorder
	client, _ = newLedgerClient(t, ledger, func(tr *Transport) {
		tr.Retry.AttemptTimeout = heldAttemptTimeout
		tr.Keys.Reconciler = lookupReconciler(&client, srv, &calls)
		tr.Hooks.Reconcile = hooks.hook
		tr.Hooks.AttemptStart = func(i AttemptStartInfo) {
			mu.Lock()
			starts = append(starts, start{i.CallID, i.Method, i.Attempt})
			mu.Unlock()
		}
	})

	done := make(chan callReply, 1)
	go func() {
		resp, err := client.Do(newKeyedPOST(t, callCtx(t), srv.url(), key, `{"item":"book"}`))
		done <- callReply{resp, err}
	}()
	r := receiveReply(t, done) // a deadlock fails here
	require.NoErrorf(t, r.err, "got %v, want the reconciled response", r.err)
	body := readAndClose(t, r.resp)
	assert.Equalf(t, http.StatusOK, r.resp.StatusCode, "got status %d, want the lookup's 200", r.resp.StatusCode)
	assert.Containsf(t, body, `"key":"`+key+`"`, "got body %q, want the order", body)
	assert.Equalf(t, int32(2), srv.gets.Load(), "got %d lookups at the server, want 2 (the 503 repeated)", srv.gets.Load())
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs at the server, want 1", srv.posts.Load())
	assert.Equalf(t, 1, srv.effects(key), "got %d effects, want 1", srv.effects(key))
	hooks.one(t, resolutionApplied)

	mu.Lock()
	defer mu.Unlock()
	require.Lenf(t, starts, 3, "got attempts %v, want the POST's and two of the lookup", starts)
	post, get := starts[0].call, starts[1].call
	want := []start{{post, http.MethodPost, 1}, {get, http.MethodGet, 1}, {get, http.MethodGet, 2}}
	assert.Equalf(t, want, starts, "got attempts %v, want %v", starts, want)
	assert.NotEqualf(t, post, get, "the lookup ran as attempt of the POST's call %d, want a call of its own", post)
}

func TestReconcileHookWithoutReconciler(t *testing.T) {
	t.Parallel()
	const key = "order-15"
	srv := newOrdersServer(t, always(orderApplyThenStall))
	var hooks reconcileRecorder
	client, _ := newLedgerClient(t, nil, func(tr *Transport) {
		tr.Retry.AttemptTimeout = heldAttemptTimeout
		tr.Hooks.Reconcile = hooks.hook
	})
	_, _, err := postKeyed(t, client, srv.url(), key, `{"item":"book"}`)
	rec := reconcileErrOf(t, err, key)
	ev := hooks.one(t, resolutionUnknown)
	assert.Samef(t, rec, ev.Err, "the hook's error %v is not the one returned, %v", ev.Err, rec)
}

// A later call under a key an earlier call left uncertain is refused without
// asking the Reconciler again, and the Reconcile hook still reports it.
func TestReconcileHookOnEarlierUncertainRefusal(t *testing.T) {
	t.Parallel()
	const key = "order-hook"
	ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
	srv := newOrdersServer(t, always(orderApplyThenStall))
	var asked atomic.Int32
	var hooks reconcileRecorder
	client, _ := newLedgerClient(t, ledger, func(tr *Transport) {
		tr.Retry.AttemptTimeout = heldAttemptTimeout
		tr.Keys.Reconciler = Reconciler(func(context.Context, *ReconcileRequiredError) (*http.Response, bool, error) {
			asked.Add(1)
			return nil, false, errors.New("cannot tell")
		})
		tr.Hooks.Reconcile = hooks.hook
	})
	_, _, err := postKeyed(t, client, srv.url(), key, `{"item":"lamp"}`)
	reconcileErrOf(t, err, key)
	_, _, err = postKeyed(t, client, srv.url(), key, `{"item":"lamp"}`)
	require.Truef(t, refusedForEarlier(err), "again: got %v, want a refusal because of the earlier call", err)
	assert.Equalf(t, int32(1), asked.Load(), "got %d Reconciler calls, want 1: the refusal does not ask again", asked.Load())
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	require.Lenf(t, hooks.seen, 2, "got %d Reconcile events, want 2", len(hooks.seen))
	assert.Truef(t, hooks.seen[1].Err.Earlier, "second event: got %v, want a refusal because of the earlier call", hooks.seen[1].Err)
	assert.Equalf(t, int32(1), srv.posts.Load(), "got %d POSTs, want 1", srv.posts.Load())
}

// The Reconciler's context is marked Reconciling, so that the throttle of
// new calls never refuses the lookups it sends with it.
func TestReconcilerContextIsMarkedReconciling(t *testing.T) {
	t.Parallel()
	ledger, _ := newLedgerOnFakeClock(t, &ledger.Memory{})
	srv := newOrdersServer(t, always(orderApplyThenStall))
	var marked, asked atomic.Bool
	client, _ := newLedgerClient(t, ledger, func(tr *Transport) {
		tr.Retry.AttemptTimeout = heldAttemptTimeout
		tr.Keys.Reconciler = func(ctx context.Context, e *ReconcileRequiredError) (*http.Response, bool, error) {
			asked.Store(true)
			marked.Store(reconciling(ctx))
			return nil, false, errors.New("cannot tell")
		}
	})
	_, _, err := postKeyed(t, client, srv.url(), "order-30", `{"item":"book"}`)
	require.ErrorIs(t, err, ErrReconcileRequired)
	require.True(t, asked.Load(), "the Reconciler was not asked")
	assert.True(t, marked.Load(), "the Reconciler's context is not marked Reconciling")
	assert.False(t, reconciling(context.Background()), "an unmarked context reads as Reconciling")
}
