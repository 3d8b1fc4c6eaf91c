package retryfusesql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is the Ledger's transactional claim, for the middleware's
// transactional mode (idempotency.TxLedger).

// TxLedger is a Ledger whose claims can be made inside a transaction that
// the handler's effects are written in (idempotency.TxLedger): given as
// idempotency.Config.Ledger, the middleware claims the key, runs the
// handler with the transaction (idempotency.Tx) and records its response
// in one transaction, so that the claim, the effects and the response
// commit together or not at all. Get it with Ledger.Transactional. Use one
// mode for a table's keys: a Begin of the ordinary mode on a key claimed
// in a transaction waits for that transaction to end.
//
// What a concurrent duplicate meets, by dialect:
//
//   - PostgreSQL: BeginTx first takes a transaction-scoped advisory lock on
//     a 64-bit hash of the table and the key (pg_try_advisory_xact_lock),
//     without waiting: a key claimed in a transaction still open is
//     KeyInFlight at once (409), never a wait for the first request's
//     transaction. Two keys whose hashes collide (one chance in 2^64 per
//     pair) are braked as one.
//   - SQLite serialises writers: the duplicate's transaction waits for the
//     first's to end (the busy timeout of the connection: open the
//     database with _txlock=immediate and a busy_timeout), and then gets
//     the stored response; one that waits longer than the busy timeout
//     fails (the middleware answers 503). Every keyed request is then one
//     writer at a time: the transactional mode on SQLite suits one host
//     and a modest rate of writes.
//
// A claim's transaction is bounded by InFlightTTL: one still open then
// (a handler that never returns) is rolled back, and its key is free.
//
// This type is concurrency safe.
type TxLedger struct{ *Ledger }

var _ idempotency.TxLedger = TxLedger{}

// Transactional returns l for the middleware's transactional mode.
func (l *Ledger) Transactional() TxLedger { return TxLedger{l} }

// BeginTx begins a transaction on the Ledger's database and claims key in
// it (see idempotency.TxLedger). With KeyNone, the ClaimTx holds the
// transaction: its Commit records the response and commits, its Rollback
// frees the key. With any other state no transaction is left open. The
// transaction is not ended by ctx's cancellation (ctx bounds the claim's
// statements), but by InFlightTTL. Errors are Begin's.
func (t TxLedger) BeginTx(ctx context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, idempotency.ClaimTx, error) {
	l := t.Ledger
	if key == "" {
		return ledger.Claim{}, nil, fmt.Errorf("%w: empty key", retryfuse.ErrInvalidIdempotencyKey)
	}
	if l.begins.Add(1)%l.sweepEvery == 0 {
		// Before the transaction: a sweep waiting for a row this
		// transaction took over would wait for ever.
		_, _ = l.Sweep(ctx, l.sweepLimit)
	}
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(l.flightMillis)*time.Millisecond)
	tx, err := l.db.BeginTx(txCtx, nil)
	if err != nil {
		cancel()
		return ledger.Claim{}, nil, unavailable("BeginTx", key, err)
	}
	fail := func(cl ledger.Claim, err error) (ledger.Claim, idempotency.ClaimTx, error) {
		_ = tx.Rollback()
		cancel()
		return cl, nil, err
	}
	// On PostgreSQL the claim first takes the key's advisory lock, in the
	// same statement.
	cl, err := l.beginLocking(ctx, tx, key, fp, l.dialect == Postgres)
	if err != nil || cl.State != decide.KeyNone {
		return fail(cl, err)
	}
	return cl, &claimTx{l: l, tx: tx, cancel: cancel, key: key, token: cl.Token}, nil
}

// lockKey returns the advisory lock of key: the first 8 bytes of SHA-256
// over the table's name, a NUL and the key.
func (l *Ledger) lockKey(key string) int64 {
	h := sha256.New()
	h.Write([]byte(l.table))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

// claimTx is a key claimed in a transaction (idempotency.ClaimTx).
type claimTx struct {
	l          *Ledger
	tx         *sql.Tx
	cancel     context.CancelFunc
	key, token string
}

func (c *claimTx) Tx() *sql.Tx { return c.tx }

// Commit completes the key in the transaction with res (as
// Ledger.Complete) and commits. An error from the completion rolls the
// transaction back; an error from the commit itself leaves its outcome
// unknown (committed, its acknowledgement lost, or not).
func (c *claimTx) Commit(ctx context.Context, res *ledger.StoredResponse) error {
	defer c.cancel()
	if err := c.l.complete(ctx, c.tx, c.key, c.token, res); err != nil {
		_ = c.tx.Rollback()
		return err
	}
	if err := c.tx.Commit(); err != nil {
		return fmt.Errorf("%w: retryfusesql: commit %q (its outcome is unknown): %w", ledger.ErrUnavailable, c.key, err)
	}
	return nil
}

// Rollback rolls the transaction back: the key is free, and nothing
// written in the transaction remains.
func (c *claimTx) Rollback() error {
	defer c.cancel()
	return c.tx.Rollback()
}
