package retryfusesql

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLedgerLifecycle(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.newLedger(t, LedgerConfig{})
		cl := begin(t, l, "k", fpA)
		wantState(t, cl, decide.KeyNone, false)
		require.GreaterOrEqual(t, len(cl.Token), 26, "token %q: want at least 128 random bits", cl.Token)
		wantState(t, begin(t, l, "k", fpA), decide.KeyInFlight, false)
		wantState(t, begin(t, l, "k", fpB), decide.KeyConflict, false)

		res := &ledger.StoredResponse{StatusCode: 201, Header: http.Header{"X-Id": {"7"}}, Body: []byte("created")}
		require.ErrorIs(t, l.Complete(ctx(t), "k", "not-the-token", res), ledger.ErrToken)
		wantState(t, begin(t, l, "k", fpA), decide.KeyInFlight, false)

		require.NoError(t, l.Complete(ctx(t), "k", cl.Token, res))
		got := begin(t, l, "k", fpA)
		wantState(t, got, decide.KeyCompleted, false)
		assert.Equal(t, res, got.Stored)
		wantState(t, begin(t, l, "k", fpB), decide.KeyConflict, false)
		require.ErrorIs(t, l.Complete(ctx(t), "k", cl.Token, res), ledger.ErrToken, "a second Complete")
		require.ErrorIs(t, l.Release(ctx(t), "k", cl.Token), ledger.ErrToken, "a Release after Complete")
	})
}

func TestReleaseFreesTheKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.newLedger(t, LedgerConfig{})
		cl := begin(t, l, "k", fpA)
		require.NoError(t, l.Release(ctx(t), "k", cl.Token))
		again := begin(t, l, "k", fpB) // free: another fingerprint is no conflict
		wantState(t, again, decide.KeyNone, false)
		require.NotEqual(t, cl.Token, again.Token)
		require.ErrorIs(t, l.Release(ctx(t), "k", cl.Token), ledger.ErrToken, "the old token on the new claim")
	})
}

func TestUncertainHoldsTheKeyUntilItsTokenEndsIt(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.newLedger(t, LedgerConfig{})
		cl := begin(t, l, "k", fpA)
		require.NoError(t, l.Uncertain(ctx(t), "k", cl.Token))
		got := begin(t, l, "k", fpA)
		wantState(t, got, decide.KeyInFlight, true)
		require.Equal(t, cl.Token, got.Token, "an uncertain claim hands out the token that ends it")
		require.ErrorIs(t, l.Uncertain(ctx(t), "k", cl.Token), ledger.ErrToken, "Uncertain twice")
		wantState(t, begin(t, l, "k", fpB), decide.KeyConflict, false)

		require.NoError(t, l.Complete(ctx(t), "k", got.Token, nil))
		got = begin(t, l, "k", fpA)
		wantState(t, got, decide.KeyCompleted, false)
		require.Nil(t, got.Stored)

		cl = begin(t, l, "u", fpA)
		require.NoError(t, l.Uncertain(ctx(t), "u", cl.Token))
		require.NoError(t, l.Release(ctx(t), "u", cl.Token), "learnt not applied")
		wantState(t, begin(t, l, "u", fpA), decide.KeyNone, false)
	})
}

func TestWrongTokenChangesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.newLedger(t, LedgerConfig{})
		begin(t, l, "k", fpA)
		for name, step := range map[string]func() error{
			"Complete":  func() error { return l.Complete(ctx(t), "k", "wrong", &ledger.StoredResponse{StatusCode: 200}) },
			"Release":   func() error { return l.Release(ctx(t), "k", "wrong") },
			"Uncertain": func() error { return l.Uncertain(ctx(t), "k", "wrong") },
			"empty":     func() error { return l.Release(ctx(t), "k", "") },
			"no key":    func() error { return l.Release(ctx(t), "absent", "wrong") },
		} {
			err := step()
			require.ErrorIs(t, err, ledger.ErrToken, name)
			wantState(t, begin(t, l, "k", fpA), decide.KeyInFlight, false)
		}
	})
}

func TestStoredResponseIsACopy(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.newLedger(t, LedgerConfig{})
		cl := begin(t, l, "k", fpA)
		res := &ledger.StoredResponse{StatusCode: 200, Header: http.Header{"A": {"1", "2"}}, Body: []byte("body")}
		require.NoError(t, l.Complete(ctx(t), "k", cl.Token, res))
		res.Header["A"][0], res.Body[0] = "changed", 'X'
		first := begin(t, l, "k", fpA).Stored
		first.Header.Set("A", "again")
		first.Body[1] = 'Y'
		got := begin(t, l, "k", fpA).Stored
		assert.Equal(t, http.Header{"A": {"1", "2"}}, got.Header)
		assert.Equal(t, "body", string(got.Body))
	})
}

func TestResultBeyondTheBoundsCompletesWithoutStoredResult(t *testing.T) {
	manyValues := http.Header{}
	for i := range 101 {
		manyValues.Add("X", strconv.Itoa(i))
	}
	cases := []struct {
		name   string
		res    *ledger.StoredResponse
		stored bool
	}{
		{"body at the bound", &ledger.StoredResponse{StatusCode: 200, Body: []byte("12345678")}, true},
		{"body over the bound", &ledger.StoredResponse{StatusCode: 200, Body: []byte("123456789")}, false},
		{"101 header values", &ledger.StoredResponse{StatusCode: 200, Header: manyValues}, false},
		{"32 KiB of header", &ledger.StoredResponse{StatusCode: 200, Header: http.Header{"X": {strings.Repeat("v", 32<<10)}}}, false},
		{"nil result", nil, false},
	}
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.newLedger(t, LedgerConfig{MaxStoredBody: 8})
		for _, c := range cases {
			cl := begin(t, l, c.name, fpA)
			require.NoError(t, l.Complete(ctx(t), c.name, cl.Token, c.res))
			got := begin(t, l, c.name, fpA)
			wantState(t, got, decide.KeyCompleted, false)
			require.Equal(t, c.stored, got.Stored != nil, "%s: stored", c.name)
		}
	})
}

func TestEmptyKeyIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.newLedger(t, LedgerConfig{})
		_, err := l.Begin(ctx(t), "", fpA)
		require.ErrorIs(t, err, retryfuse.ErrInvalidIdempotencyKey)
	})
}

func TestInvalidConfigNamesTheField(t *testing.T) {
	db := sqliteBackend(t).open(t)
	for field, cfg := range map[string]LedgerConfig{
		"LedgerConfig.Dialect":       {},
		"LedgerConfig.Table":         {Dialect: SQLite, Table: "keys; DROP TABLE x"},
		"LedgerConfig.TTL":           {Dialect: SQLite, TTL: -1},
		"LedgerConfig.InFlightTTL":   {Dialect: SQLite, InFlightTTL: -1},
		"LedgerConfig.MaxStoredBody": {Dialect: SQLite, MaxStoredBody: -1},
		"LedgerConfig.SweepEvery":    {Dialect: SQLite, SweepEvery: -1},
		"LedgerConfig.SweepLimit":    {Dialect: SQLite, SweepLimit: -1},
	} {
		_, err := NewLedger(ctx(t), db, cfg)
		require.ErrorIs(t, err, retryfuse.ErrInvalidPolicy, field)
		require.Contains(t, err.Error(), field)
	}
	_, err := NewLedger(ctx(t), nil, LedgerConfig{Dialect: SQLite})
	require.ErrorIs(t, err, retryfuse.ErrInvalidPolicy)
}

func TestClosedDatabaseMakesBeginFail(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		db := b.open(t)
		l := b.ledgerOn(t, db, LedgerConfig{})
		require.NoError(t, db.Close())
		_, err := l.Begin(ctx(t), "k", fpA)
		require.ErrorIs(t, err, ledger.ErrUnavailable)
		var claimErr error = err
		require.False(t, errors.Is(claimErr, ledger.ErrToken))
	})
}
