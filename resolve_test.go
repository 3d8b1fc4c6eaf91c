package retryfuse

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// storeLedger is a ledger.Memory that answers as a store reached over the
// network does: not at all once the context it is given has ended. It
// records the deadline of every step it is given.
type storeLedger struct {
	ledger.Memory
	deadlines []time.Duration // time left at each step; -1 for none
}

func (l *storeLedger) step(ctx context.Context) error {
	left := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	l.deadlines = append(l.deadlines, left)
	return ctx.Err()
}

func (l *storeLedger) Complete(ctx context.Context, key, token string, res *ledger.StoredResponse) error {
	if err := l.step(ctx); err != nil {
		return err
	}
	return l.Memory.Complete(ctx, key, token, res)
}

func (l *storeLedger) Release(ctx context.Context, key, token string) error {
	if err := l.step(ctx); err != nil {
		return err
	}
	return l.Memory.Release(ctx, key, token)
}

func (l *storeLedger) Uncertain(ctx context.Context, key, token string) error {
	if err := l.step(ctx); err != nil {
		return err
	}
	return l.Memory.Uncertain(ctx, key, token)
}

// The reconcile flow of the README, with the caller's own context reused
// after its deadline made the write uncertain: Resolve works alike under no
// ledger, a ledger.Memory and a ledger that needs a live context, and the
// next call under the key is sent at once.
func TestResolveAfterCallersDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ledger func() ledger.Ledger
	}{
		{"no ledger", func() ledger.Ledger { return nil }},
		{"ledger.Memory", func() ledger.Ledger { return &ledger.Memory{} }},
		{"a store's ledger", func() ledger.Ledger { return &storeLedger{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := stallingServer(t, 1)
			tr := newTransport(t, newFakeClock(), &Transport{Retry: RetryPolicy{Budget: budget.Unlimited()}, Keys: KeyPolicy{Ledger: tc.ledger()}})

			ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
			defer cancel()
			req := newRequest(t, ctx, http.MethodPost, srv.URL, "order")
			req.Header.Set("Idempotency-Key", "order-11")
			_, _, err := do(tr, req)
			var rec *ReconcileRequiredError
			require.ErrorAs(t, err, &rec)
			require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded, "the caller's deadline made the write uncertain")

			require.NoError(t, rec.Resolve(ctx, false), "Resolve with the expired context")

			again := newRequest(t, testCtx(t), http.MethodPost, srv.URL, "order")
			again.Header.Set("Idempotency-Key", "order-11")
			resp, _, err := do(tr, again)
			require.NoError(t, err, "the key is free at once")
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, 2, srv.Requests())

			if l, ok := tr.Keys.Ledger.(*storeLedger); ok {
				for i, left := range l.deadlines {
					assert.True(t, left > 0 && left <= ledgerStepTimeout, "step %d: a settling step has a time of its own, bounded: %v left", i, left)
				}
			}
		})
	}
}
