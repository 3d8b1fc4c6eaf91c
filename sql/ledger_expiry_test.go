package retryfusesql

import (
	"context"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/require"
)

// Expiry runs on the tests' clock, which replaces the database's in the
// same statements.

func clocked(t *testing.T, b *backend, cfg LedgerConfig) (*Ledger, *fakeClock) {
	l := b.newLedger(t, cfg)
	c := newFakeClock()
	l.setClock(c.now)
	return l, c
}

func TestClaimExpiresUncertainNeverFree(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, c := clocked(t, b, LedgerConfig{InFlightTTL: time.Minute, TTL: 10 * time.Minute})
		cl := begin(t, l, "k", fpA)
		c.advance(time.Minute - time.Millisecond)
		wantState(t, begin(t, l, "k", fpA), decide.KeyInFlight, false)
		c.advance(time.Millisecond)
		got := begin(t, l, "k", fpA)
		wantState(t, got, decide.KeyInFlight, true)
		require.Equal(t, cl.Token, got.Token)
		wantState(t, begin(t, l, "k", fpB), decide.KeyConflict, false)
		c.advance(10*time.Minute - time.Millisecond)
		wantState(t, begin(t, l, "k", fpA), decide.KeyInFlight, true)
		c.advance(time.Millisecond)
		wantState(t, begin(t, l, "k", fpB), decide.KeyNone, false)
	})
}

func TestOwnerMayEndAnExpiredClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, c := clocked(t, b, LedgerConfig{InFlightTTL: time.Minute, TTL: 10 * time.Minute})
		late := begin(t, l, "late", fpA)
		done := begin(t, l, "done", fpA)
		c.advance(2 * time.Minute)
		wantState(t, begin(t, l, "done", fpA), decide.KeyInFlight, true)
		require.NoError(t, l.Complete(ctx(t), "done", done.Token, &ledger.StoredResponse{StatusCode: 204}))
		wantState(t, begin(t, l, "done", fpA), decide.KeyCompleted, false)
		// A late Uncertain holds the key for TTL from now.
		require.NoError(t, l.Uncertain(ctx(t), "late", late.Token))
		c.advance(9*time.Minute + 30*time.Second) // past the claim's own end, within TTL of Uncertain
		wantState(t, begin(t, l, "late", fpA), decide.KeyInFlight, true)
	})
}

func TestCompletedKeyIsFreeAfterTTL(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, c := clocked(t, b, LedgerConfig{TTL: time.Hour})
		cl := begin(t, l, "k", fpA)
		c.advance(3 * time.Minute)
		require.NoError(t, l.Complete(ctx(t), "k", cl.Token, &ledger.StoredResponse{StatusCode: 200}))
		c.advance(time.Hour - time.Millisecond) // TTL counts from Complete
		wantState(t, begin(t, l, "k", fpB), decide.KeyConflict, false)
		c.advance(time.Millisecond)
		require.Equal(t, int64(1), countRows(t, l), "the expired row is still there")
		wantState(t, begin(t, l, "k", fpB), decide.KeyNone, false) // absent though not deleted
		require.ErrorIs(t, l.Release(ctx(t), "k", cl.Token), ledger.ErrToken)
	})
}

func TestExpiredTokenEndsNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, c := clocked(t, b, LedgerConfig{InFlightTTL: time.Minute, TTL: time.Minute})
		cl := begin(t, l, "k", fpA)
		c.advance(2 * time.Minute) // past InFlightTTL + TTL: absent
		require.ErrorIs(t, l.Complete(ctx(t), "k", cl.Token, nil), ledger.ErrToken)
		require.ErrorIs(t, l.Uncertain(ctx(t), "k", cl.Token), ledger.ErrToken)
		wantState(t, begin(t, l, "k", fpA), decide.KeyNone, false)
	})
}

func TestSweepDeletesAtMostItsLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, c := clocked(t, b, LedgerConfig{TTL: time.Minute, InFlightTTL: time.Minute, SweepLimit: 3, SweepEvery: 1000})
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			cl := begin(t, l, k, fpA)
			require.NoError(t, l.Complete(ctx(t), k, cl.Token, nil))
		}
		c.advance(time.Minute)
		begin(t, l, "live", fpA)
		n, err := l.Sweep(ctx(t), 2)
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		n, err = l.Sweep(ctx(t), 0) // SweepLimit
		require.NoError(t, err)
		require.Equal(t, int64(3), n)
		n, err = l.Sweep(ctx(t), 0)
		require.NoError(t, err)
		require.Equal(t, int64(0), n)
		require.Equal(t, int64(1), countRows(t, l))
		wantState(t, begin(t, l, "live", fpA), decide.KeyInFlight, false)
	})
}

func TestBeginSweepsEverySweepEveryBegins(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, c := clocked(t, b, LedgerConfig{TTL: time.Minute, InFlightTTL: time.Minute, SweepEvery: 4})
		for _, k := range []string{"a", "b", "c"} {
			cl := begin(t, l, k, fpA)
			require.NoError(t, l.Release(ctx(t), k, cl.Token))
			begin(t, l, k, fpA) // claims left to expire
		}
		c.advance(2 * time.Minute)
		require.Equal(t, int64(3), countRows(t, l))
		for range 2 { // Begins 7 and 8: the 8th sweeps
			begin(t, l, "x", fpA)
		}
		require.Equal(t, int64(1), countRows(t, l), "the 8th Begin swept the three expired claims")
	})
}

func countRows(t testing.TB, l *Ledger) int64 {
	t.Helper()
	var n int64
	require.NoError(t, l.db.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM "+l.table).Scan(&n))
	return n
}

// A sweep that meets an expired row taken over by a claim still in its
// transaction neither deletes the claim nor waits for it (PostgreSQL
// skips the locked row; SQLite's sweep waits for the one writer, and
// then finds the row live).
func TestSweepSparesARowTakenOverInAnOpenTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, c := clocked(t, b, LedgerConfig{TTL: time.Minute, InFlightTTL: time.Minute})
		cl := begin(t, l, "k", fpA)
		require.NoError(t, l.Complete(ctx(t), "k", cl.Token, nil))
		c.advance(time.Minute) // expired, not deleted
		claim, tx, err := l.Transactional().BeginTx(ctx(t), "k", fpA)
		require.NoError(t, err)
		wantState(t, claim, decide.KeyNone, false)

		swept := make(chan error, 1)
		sweepCtx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
		defer cancel()
		go func() { _, err := l.Sweep(sweepCtx, 0); swept <- err }()
		if b.dialect == Postgres {
			require.NoError(t, <-swept, "the sweep waited for the open transaction")
		}
		require.NoError(t, tx.Commit(ctx(t), &ledger.StoredResponse{StatusCode: 201}))
		if b.dialect == SQLite {
			require.NoError(t, <-swept)
		}
		got := begin(t, l, "k", fpA)
		wantState(t, got, decide.KeyCompleted, false)
		require.NotNil(t, got.Stored)
	})
}
