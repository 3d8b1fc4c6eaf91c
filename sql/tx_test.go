package retryfusesql

import (
	"net/http"
	"strings"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/stretchr/testify/require"
)

func TestTxCommittedResponseIsReplayedAndTheHandlerNotRerun(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		db := b.open(t)
		one := txServer(t, b.ledgerOn(t, db, LedgerConfig{}).Transactional(), e, idempotency.Config{})
		two := txServer(t, b.newLedger(t, LedgerConfig{}).Transactional(), e, idempotency.Config{})
		require.Equal(t, result{201, "", "1", "created"}, postKeyed(t, one, "k1", "x"))
		require.Equal(t, result{201, "true", "1", "created"}, postKeyed(t, two, "k1", "x"))
		require.Equal(t, result{201, "true", "1", "created"}, postKeyed(t, one, "k1", "x"))
		require.Equal(t, int64(1), e.runs.Load())
		require.Equal(t, int64(1), e.count(t, db, "k1"))
	})
}

func TestTxHandlerPanicLeavesKeyFreeAndEffectAbsent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		e.after = func(w http.ResponseWriter, r *http.Request, run int64) bool {
			if run == 1 {
				panic("the handler fails after writing its effect")
			}
			return false
		}
		db := b.open(t)
		l := b.ledgerOn(t, db, LedgerConfig{})
		srv := txServer(t, l.Transactional(), e, idempotency.Config{})
		_, err := tryPost(t, srv, "k1", "x")
		require.Error(t, err, "a handler that panicked sends no response")
		require.Equal(t, int64(0), e.count(t, db, "k1"), "the effect of the run that panicked was committed")
		require.Equal(t, int64(0), countRows(t, l), "the key's claim was committed")

		require.Equal(t, result{201, "", "2", "created"}, postKeyed(t, srv, "k1", "x"), "the retry runs")
		require.Equal(t, result{201, "true", "2", "created"}, postKeyed(t, srv, "k1", "x"))
		require.Equal(t, int64(1), e.count(t, db, "k1"))
	})
}

func TestTxReleaseRollsTheEffectBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		e.after = func(w http.ResponseWriter, r *http.Request, run int64) bool {
			if run > 1 {
				return false
			}
			idempotency.Release(w)
			http.Error(w, "a dependency is down", http.StatusServiceUnavailable)
			return true
		}
		db := b.open(t)
		srv := txServer(t, b.ledgerOn(t, db, LedgerConfig{}).Transactional(), e, idempotency.Config{})
		got := postKeyed(t, srv, "k1", "x")
		require.Equal(t, http.StatusServiceUnavailable, got.status)
		require.Equal(t, "a dependency is down\n", got.body, "the released response is sent as written")
		require.Equal(t, int64(0), e.count(t, db, "k1"))
		require.Equal(t, result{201, "", "2", "created"}, postKeyed(t, srv, "k1", "x"))
		require.Equal(t, int64(1), e.count(t, db, "k1"))
	})
}

func TestTxResponseOverTheBoundIsRolledBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		e.after = func(w http.ResponseWriter, r *http.Request, run int64) bool {
			w.Write([]byte(strings.Repeat("x", 65)))
			return true
		}
		db := b.open(t)
		l := b.ledgerOn(t, db, LedgerConfig{})
		srv := txServer(t, l.Transactional(), e, idempotency.Config{MaxStoredBody: 64})
		got := postKeyed(t, srv, "k1", "x")
		require.Equal(t, http.StatusInternalServerError, got.status)
		require.Contains(t, got.body, idempotency.ProblemResponseTooLarge)
		require.NotContains(t, got.body, "xxxx", "a byte of the response left before the commit")
		require.Equal(t, int64(0), e.count(t, db, "k1"))
		require.Equal(t, int64(0), countRows(t, l))
	})
}

func TestTxLostCommitAcknowledgementIsAnswered503AndTheRetryReplays(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		db := b.open(t)
		l := &lostAck{TxLedger: b.ledgerOn(t, db, LedgerConfig{}).Transactional()}
		l.lost.Store(true)
		srv := txServer(t, l, e, idempotency.Config{})
		got := postKeyed(t, srv, "k1", "x")
		require.Equal(t, http.StatusServiceUnavailable, got.status, "a commit whose outcome is unknown is not reported a success")
		require.Contains(t, got.body, idempotency.ProblemLedgerUnavailable)
		require.Empty(t, got.run, "the handler's response was sent")
		require.Equal(t, result{201, "true", "1", "created"}, postKeyed(t, srv, "k1", "x"), "the commit took effect: the retry replays")
		require.Equal(t, int64(1), e.count(t, db, "k1"))
	})
}

func TestTxHandlerThatNeverCallsTxIsRecorded(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		h := &charges{}
		srv := txServer(t, b.newLedger(t, LedgerConfig{}).Transactional(), h, idempotency.Config{})
		require.Equal(t, result{201, "", "1", "created x"}, postKeyed(t, srv, "k1", "x"))
		require.Equal(t, result{201, "true", "1", "created x"}, postKeyed(t, srv, "k1", "x"))
		require.Equal(t, http.StatusUnprocessableEntity, postKeyed(t, srv, "k1", "y").status)
	})
}

func TestTxDatabaseDownIsAnswered503(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		db := b.open(t)
		srv := txServer(t, b.ledgerOn(t, db, LedgerConfig{}).Transactional(), e, idempotency.Config{})
		require.NoError(t, db.Close())
		require.Equal(t, http.StatusServiceUnavailable, postKeyed(t, srv, "k1", "x").status)
		require.Equal(t, int64(0), e.runs.Load())
	})
}

func TestTxBeginTxOnAKeyTakenReturnsNoTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.newLedger(t, LedgerConfig{})
		cl, c, err := l.Transactional().BeginTx(ctx(t), "k", fpA)
		require.NoError(t, err)
		wantState(t, cl, decide.KeyNone, false)
		require.NoError(t, c.Commit(ctx(t), nil))
		cl, c, err = l.Transactional().BeginTx(ctx(t), "k", fpA)
		require.NoError(t, err)
		wantState(t, cl, decide.KeyCompleted, false)
		require.Nil(t, c)
		cl, c, err = l.Transactional().BeginTx(ctx(t), "k", fpB)
		require.NoError(t, err)
		wantState(t, cl, decide.KeyConflict, false)
		require.Nil(t, c)
	})
}

func TestTxStepKeyIsTheSameInTheRunAfterARollback(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		var keys []string
		e.after = func(w http.ResponseWriter, r *http.Request, run int64) bool {
			k, err := idempotency.StepKey(r.Context(), "charge-card")
			if err != nil {
				t.Errorf("StepKey: %v", err) // the handler's goroutine: no FailNow
			}
			keys = append(keys, k)
			if run == 1 {
				panic("after the downstream call")
			}
			return false
		}
		srv := txServer(t, b.newLedger(t, LedgerConfig{}).Transactional(), e, idempotency.Config{})
		_, err := tryPost(t, srv, "k1", "x")
		require.Error(t, err)
		require.Equal(t, http.StatusCreated, postKeyed(t, srv, "k1", "x").status)
		require.Len(t, keys, 2)
		require.Equal(t, keys[0], keys[1], "the re-run sends its downstream call under another key")
	})
}
