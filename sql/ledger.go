package retryfusesql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/stored"
	"github.com/retryfuse/retryfuse/ledger"
)

// The states of a row (its state column).
const (
	stateInFlight  = 0
	stateUncertain = 1
	stateCompleted = 2
)

// Ledger is a ledger.Ledger kept in a SQL database (PostgreSQL or
// SQLite) through database/sql, shared by every process that opens the
// same database and Table: a duplicate sent to another replica while the
// key is in flight is braked, and once the key is completed it gets the
// stored result. Its semantics are ledger.Memory's.
//
// Each step is one statement: Begin claims a free key with INSERT … ON
// CONFLICT … DO UPDATE … WHERE (the row's time has passed) RETURNING, so
// that of any number of concurrent Begins on a free key, in any number
// of processes, exactly one gets KeyNone; the others read the key's row
// (a second statement). Complete, Release and Uncertain are each one
// UPDATE or DELETE conditioned on the owner's token. No lock is held in
// this process: the database decides. Owner tokens are 128 random bits
// (crypto/rand).
//
// Time is the database's: each statement reads its clock (PostgreSQL's
// statement_timestamp, SQLite's julianday('now')), so that every
// process sharing the database measures InFlightTTL and TTL on one clock,
// whatever the processes' own clocks say; a process whose clock is wrong
// neither frees another's key early nor keeps it late. The tests replace
// the database's clock by a parameter of the same statements (an
// unexported seam), so that expiry is tested without sleeping.
//
// Expiry is lazy and bounded: a row whose time has passed reads as absent
// (a claim whose InFlightTTL passed reads as uncertain) in every
// statement, deleted or not; every SweepEvery Begins, the Begin whose
// turn it is deletes at most SweepLimit such rows (see Sweep). No
// goroutine is started.
//
// A database that cannot be reached makes Begin return an error wrapping
// ledger.ErrUnavailable: a key is never taken for free without
// the database's word (the middleware answers 503, the Transport sends
// nothing). A failed Complete, Release or Uncertain returns its error and
// is not retried: the claim then expires uncertain after InFlightTTL.
//
// Create it with NewLedger. This type is concurrency safe.
type Ledger struct {
	db            *sql.DB
	dialect       Dialect
	table         string
	q             queries
	ttlMillis     int64
	flightMillis  int64
	maxStoredBody int
	sweepEvery    uint64
	sweepLimit    int
	begins        atomic.Uint64
	// stmts are the statements of q, prepared once by NewLedger, by
	// their text (see prepared). Never changed after NewLedger.
	stmts map[string]*sql.Stmt
	// clock, when not nil, gives the time of every statement instead of
	// the database's clock: the tests' seam (export_test.go).
	clock func() time.Time
}

var _ ledger.Ledger = (*Ledger)(nil)

// NewLedger returns a Ledger on db, after bringing its schema to
// SchemaVersion (see migrate): a missing schema is created, an older
// version migrated, and a newer or unknown version refused with an error
// wrapping ErrSchemaVersion. An invalid setting, or a nil db, gives an
// error wrapping retryfuse.ErrInvalidPolicy that names it; a database
// that cannot be reached, one wrapping ledger.ErrUnavailable.
func NewLedger(ctx context.Context, db *sql.DB, cfg LedgerConfig) (*Ledger, error) {
	if db == nil {
		return nil, invalid("db", "must not be nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	table := cfg.Table
	if table == "" {
		table = DefaultTable
	}
	l := &Ledger{
		db:            db,
		dialect:       cfg.Dialect,
		table:         table,
		q:             newQueries(cfg.Dialect, table),
		ttlMillis:     ceilMillis(orDefault(cfg.TTL, defaultLedgerTTL)),
		flightMillis:  ceilMillis(orDefault(cfg.InFlightTTL, defaultLedgerInFlightTTL)),
		maxStoredBody: orDefault(cfg.MaxStoredBody, defaultLedgerMaxStoredBody),
		sweepEvery:    uint64(orDefault(cfg.SweepEvery, defaultSweepEvery)),
		sweepLimit:    orDefault(cfg.SweepLimit, defaultSweepLimit),
	}
	if err := migrate(ctx, db, cfg.Dialect, table); err != nil {
		if errors.Is(err, ErrSchemaVersion) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
	}
	if err := l.prepare(ctx); err != nil {
		return nil, fmt.Errorf("%w: retryfusesql: prepare the ledger's statements: %w", ledger.ErrUnavailable, err)
	}
	return l, nil
}

// prepare prepares the Ledger's statements (see prepared).
func (l *Ledger) prepare(ctx context.Context) error {
	l.stmts = map[string]*sql.Stmt{}
	for _, q := range [...]string{l.q.claim, l.q.claimLocked, l.q.look, l.q.complete, l.q.release, l.q.uncertain, l.q.sweep} {
		if q == "" {
			continue
		}
		st, err := l.db.PrepareContext(ctx, q)
		if err != nil {
			for _, st := range l.stmts {
				_ = st.Close()
			}
			return err
		}
		l.stmts[q] = st
	}
	return nil
}

// prepared runs the Ledger's statements as prepared once by NewLedger,
// on the database or within a transaction, so that a driver that does
// not cache statements (modernc.org/sqlite parses each statement it is
// given) parses each once a connection rather than at every step (the
// database/sql Stmt keeps one a connection, and a transaction reuses its
// connection's). Any other statement goes to ex as it is.
type prepared struct {
	l  *Ledger
	ex execer
}

func (p prepared) stmt(ctx context.Context, query string) *sql.Stmt {
	st := p.l.stmts[query]
	if st == nil {
		return nil
	}
	if tx, ok := p.ex.(*sql.Tx); ok {
		return tx.StmtContext(ctx, st)
	}
	return st
}

func (p prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.ex.ExecContext(ctx, query, args...)
}

func (p prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.ex.QueryRowContext(ctx, query, args...)
}

// ceilMillis returns d in whole milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// now returns parameter 1 of every statement: nil for the database's
// clock, or the tests' clock in milliseconds.
func (l *Ledger) now() any {
	if l.clock == nil {
		return nil
	}
	return l.clock().UnixMilli()
}

// execer is what a step runs its statements on: the database, or a
// transaction (see TxLedger).
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Begin claims key when it is free (KeyNone, with a token), else reports
// its state; a fingerprint other than the stored one is KeyConflict
// whatever the state. An empty key is an error wrapping
// retryfuse.ErrInvalidIdempotencyKey; a database failure, one wrapping
// ledger.ErrUnavailable.
func (l *Ledger) Begin(ctx context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, error) {
	cl, err := l.begin(ctx, l.db, key, fp)
	if err == nil && l.begins.Add(1)%l.sweepEvery == 0 {
		_, _ = l.Sweep(ctx, l.sweepLimit) // best effort: an expired row reads as absent anyway
	}
	return cl, err
}

// begin runs Begin's statements on ex.
func (l *Ledger) begin(ctx context.Context, ex execer, key string, fp ledger.Fingerprint) (ledger.Claim, error) {
	return l.beginLocking(ctx, ex, key, fp, false)
}

// beginLocking runs Begin's statements on ex; with lock, the claim takes
// the key's advisory lock first, in the same statement (claimLocked),
// and a lock held by another transaction is KeyInFlight.
func (l *Ledger) beginLocking(ctx context.Context, ex execer, key string, fp ledger.Fingerprint, lock bool) (ledger.Claim, error) {
	if key == "" {
		return ledger.Claim{}, fmt.Errorf("%w: empty key", retryfuse.ErrInvalidIdempotencyKey)
	}
	token := rand.Text()
	// The row read after a claim that found one may be gone by then
	// (released, or its time passed): claim again, a bounded number of
	// times.
	for range 3 {
		var got string
		var err error
		if lock {
			var locked bool
			var tok sql.NullString
			err = (prepared{l, ex}).QueryRowContext(ctx, l.q.claimLocked, l.now(), []byte(key), fp[:], token, l.flightMillis, l.ttlMillis, l.lockKey(key)).Scan(&locked, &tok)
			switch {
			case err == nil && !locked:
				return ledger.Claim{State: decide.KeyInFlight}, nil
			case err == nil && !tok.Valid:
				err = sql.ErrNoRows // the key has a live row
			}
			got = tok.String
		} else {
			err = (prepared{l, ex}).QueryRowContext(ctx, l.q.claim, l.now(), []byte(key), fp[:], token, l.flightMillis, l.ttlMillis).Scan(&got)
		}
		switch {
		case err == nil && got == token:
			return ledger.Claim{State: decide.KeyNone, Token: token}, nil
		case err == nil:
			return ledger.Claim{}, unavailable("Begin", key, fmt.Errorf("the claim returned another token"))
		case !errors.Is(err, sql.ErrNoRows):
			return ledger.Claim{}, unavailable("Begin", key, err)
		}
		cl, found, err := l.look(ctx, ex, key, fp)
		if err != nil {
			return ledger.Claim{}, unavailable("Begin", key, err)
		}
		if found {
			return cl, nil
		}
	}
	return ledger.Claim{}, unavailable("Begin", key, errors.New("the key's row changed under three claims in a row"))
}

// look reads key's live row and returns its claim; found is false when
// there is none.
func (l *Ledger) look(ctx context.Context, ex execer, key string, fp ledger.Fingerprint) (cl ledger.Claim, found bool, err error) {
	var (
		rowFP     []byte
		state     int64
		token     string
		hasResult int64
		status    sql.NullInt64
		header    sql.NullString
		body      []byte
		lapsed    int64
	)
	err = (prepared{l, ex}).QueryRowContext(ctx, l.q.look, l.now(), []byte(key)).Scan(&rowFP, &state, &token, &hasResult, &status, &header, &body, &lapsed)
	if errors.Is(err, sql.ErrNoRows) {
		return cl, false, nil
	}
	if err != nil {
		return cl, false, err
	}
	if string(rowFP) != string(fp[:]) {
		return ledger.Claim{State: decide.KeyConflict}, true, nil
	}
	switch {
	case state == stateCompleted:
		cl = ledger.Claim{State: decide.KeyCompleted}
		if hasResult == 1 {
			res := &ledger.StoredResponse{StatusCode: int(status.Int64), Body: body}
			if err := json.Unmarshal([]byte(header.String), &res.Header); err != nil {
				return cl, false, fmt.Errorf("stored header: %w", err)
			}
			cl.Stored = res
		}
	case state == stateUncertain || state == stateInFlight && lapsed == 1:
		cl = ledger.Claim{State: decide.KeyInFlight, Uncertain: true, Token: token}
	case state == stateInFlight:
		cl = ledger.Claim{State: decide.KeyInFlight}
	default:
		return cl, false, fmt.Errorf("the key's row has state %d", state)
	}
	return cl, true, nil
}

// Complete ends a claim with a confirmed result, stored when res is not
// nil, its body is at most MaxStoredBody bytes and its headers at most
// 100 values and 32 KiB; the key is then kept for TTL.
func (l *Ledger) Complete(ctx context.Context, key, token string, res *ledger.StoredResponse) error {
	return l.complete(ctx, l.db, key, token, res)
}

func (l *Ledger) complete(ctx context.Context, ex execer, key, token string, res *ledger.StoredResponse) error {
	has, status, header, body, err := l.encodeStored(key, res)
	if err != nil {
		return err
	}
	return l.end(ctx, ex, "Complete", key, token, l.q.complete, l.ttlMillis, has, status, header, body)
}

// encodeStored returns the columns of res: has_result 0 and NULLs when
// res is nil or beyond the bounds.
func (l *Ledger) encodeStored(key string, res *ledger.StoredResponse) (has int64, status, header, body any, err error) {
	if res != nil && len(res.Body) <= l.maxStoredBody && stored.HeaderFits(res.Header) {
		h, err := json.Marshal(res.Header)
		if err != nil {
			return 0, nil, nil, nil, fmt.Errorf("retryfusesql: Complete %q: encode header: %w", key, err)
		}
		has, status, header, body = 1, int64(res.StatusCode), string(h), res.Body
		if res.Body == nil {
			body = []byte{}
		}
	}
	return has, status, header, body, nil
}

// Release ends a claim that took no effect: the key is free again.
func (l *Ledger) Release(ctx context.Context, key, token string) error {
	return l.end(ctx, l.db, "Release", key, token, l.q.release)
}

// Uncertain ends a claim whose outcome is unknown: the key is held (Begin
// answers KeyInFlight with Uncertain) for TTL.
func (l *Ledger) Uncertain(ctx context.Context, key, token string) error {
	return l.end(ctx, l.db, "Uncertain", key, token, l.q.uncertain, l.ttlMillis)
}

// end runs one step's statement; no row changed means that token does
// not own key: an error wrapping ledger.ErrToken.
func (l *Ledger) end(ctx context.Context, ex execer, step, key, token, query string, args ...any) error {
	res, err := (prepared{l, ex}).ExecContext(ctx, query, append([]any{l.now(), []byte(key), token}, args...)...)
	if err != nil {
		return unavailable(step, key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return unavailable(step, key, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: key %q", ledger.ErrToken, key)
	}
	return nil
}

// Sweep deletes at most limit keys whose time has passed (a zero or
// negative limit means SweepLimit) and returns how many it deleted. Begin
// calls it every SweepEvery Begins; call it yourself (from a job of your
// own) to keep the table small when keys come in bursts.
func (l *Ledger) Sweep(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		limit = l.sweepLimit
	}
	res, err := (prepared{l, l.db}).ExecContext(ctx, l.q.sweep, l.now(), limit)
	if err != nil {
		return 0, unavailable("Sweep", "", err)
	}
	return res.RowsAffected()
}

func unavailable(step, key string, err error) error {
	return fmt.Errorf("%w: retryfusesql: %s %q: %w", ledger.ErrUnavailable, step, key, err)
}
