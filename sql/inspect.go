package retryfusesql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
)

// This file is the Ledger's ledger.Inspector and ledger.Settler: what an
// operator reads of the table and settles by hand.

var (
	_ ledger.Inspector = (*Ledger)(nil)
	_ ledger.Settler   = (*Ledger)(nil)
)

// row is a key's row as read for an operator, the token kept for the
// compare-and-set of Settle and never shown.
type row struct {
	now                    int64 // the statement's time
	key                    []byte
	fp                     []byte
	state                  int64
	token                  string
	flightMS, goneMS       int64
	hasResult              int64
	status                 sql.NullInt64
	present                bool // a live row was read
	lapsed                 int64
	flightMillis, ttlMilli int64 // the reader's settings, which date the row
}

// info returns what r says of its key. Since is derived from the row's
// expiries and this Ledger's TTL and InFlightTTL (the table records
// expiries only): read it with the settings of the Ledgers that write
// it.
func (r *row) info() ledger.KeyInfo {
	k := ledger.KeyInfo{Key: string(r.key), Now: time.UnixMilli(r.now)}
	if !r.present {
		return k
	}
	copy(k.Fingerprint[:], r.fp)
	k.Expires = time.UnixMilli(r.goneMS)
	switch {
	case r.state == stateInFlight && r.lapsed == 0:
		k.State = ledger.StateInFlight
		k.Since, k.Expires = time.UnixMilli(r.flightMS-r.flightMillis), time.UnixMilli(r.flightMS)
	case r.state == stateInFlight:
		k.State, k.Lapsed, k.Since = ledger.StateUncertain, true, time.UnixMilli(r.flightMS)
	case r.state == stateUncertain:
		k.State, k.Since = ledger.StateUncertain, time.UnixMilli(r.goneMS-r.ttlMilli)
	default:
		k.State, k.Since = ledger.StateCompleted, time.UnixMilli(r.goneMS-r.ttlMilli)
		k.HasStored = r.hasResult == 1
		if k.HasStored {
			k.StoredStatus = int(r.status.Int64)
		}
	}
	// The version is a digest of what Settle compares: the token (which
	// it never shows), the state, whether the claim has lapsed, and the
	// row's expiry (new at every change of state).
	h := sha256.New()
	h.Write([]byte(r.token))
	h.Write(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(r.state)), uint64(r.lapsed)), uint64(r.goneMS)))
	k.Version = hex.EncodeToString(h.Sum(nil)[:12])
	return k
}

// scan reads one row of lookSQL or listSQL.
func (r *row) scan(sc interface{ Scan(...any) error }, withKey bool) error {
	var (
		key, fp                  []byte
		state, flight, gone, has sql.NullInt64
		token                    sql.NullString
		lapsed                   sql.NullInt64
	)
	dest := []any{&r.now}
	if withKey {
		dest = append(dest, &key)
	}
	dest = append(dest, &fp, &state, &token, &flight, &gone, &has, &r.status, &lapsed)
	if err := sc.Scan(dest...); err != nil {
		return err
	}
	if withKey {
		r.key = key
	}
	r.present = state.Valid && gone.Int64 > r.now // a list reads rows whose time has passed too
	r.fp, r.state, r.token, r.flightMS, r.goneMS, r.hasResult, r.lapsed = fp, state.Int64, token.String, flight.Int64, gone.Int64, has.Int64, lapsed.Int64
	return nil
}

func (l *Ledger) newRow() row { return row{flightMillis: l.flightMillis, ttlMilli: l.ttlMillis} }

// read returns key's live row (present false when there is none).
func (l *Ledger) read(ctx context.Context, key string) (row, error) {
	r := l.newRow()
	r.key = []byte(key)
	if err := r.scan(l.db.QueryRowContext(ctx, l.q.inspect, l.now(), []byte(key)), false); err != nil {
		return r, unavailable("Lookup", key, err)
	}
	return r, nil
}

// Lookup implements ledger.Inspector: one statement, on the database's
// clock. Since is derived from the row's expiries and this Ledger's TTL
// and InFlightTTL.
func (l *Ledger) Lookup(ctx context.Context, key string) (ledger.KeyInfo, error) {
	r, err := l.read(ctx, key)
	if err != nil {
		return ledger.KeyInfo{}, err
	}
	return r.info(), nil
}

// List implements ledger.Inspector: one statement that reads at most
// q.Limit rows in the order of their keys, from after the cursor's key,
// through the table's primary key (a keyset page: never a scan of the
// table). Rows whose time has passed are skipped.
func (l *Ledger) List(ctx context.Context, q ledger.Query) (ledger.Page, error) {
	q, err := ledger.CheckQuery(q)
	if err != nil {
		return ledger.Page{}, err
	}
	after, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err != nil {
		return ledger.Page{}, invalid("Query.Cursor", "is not a cursor of this ledger")
	}
	rows, err := l.db.QueryContext(ctx, l.q.list, l.now(), after, q.Limit)
	if err != nil {
		return ledger.Page{}, unavailable("List", "", err)
	}
	defer rows.Close()
	var p ledger.Page
	n := 0
	var last []byte
	for rows.Next() {
		r := l.newRow()
		if err := r.scan(rows, true); err != nil {
			return ledger.Page{}, unavailable("List", "", err)
		}
		n, last = n+1, r.key
		if k := r.info(); q.Matches(k) {
			p.Keys = append(p.Keys, k)
		}
	}
	if err := rows.Err(); err != nil {
		return ledger.Page{}, unavailable("List", "", err)
	}
	if n == q.Limit {
		p.Cursor = base64.RawURLEncoding.EncodeToString(last)
	}
	return p, nil
}

// Settle implements ledger.Settler: it reads the key's row, and settles
// it in one statement conditioned on what it read (the token, the state,
// the expiry), so that a row changed in between is left alone.
func (l *Ledger) Settle(ctx context.Context, key, version string, s ledger.Settlement) (ledger.KeyInfo, error) {
	if err := ledger.CheckSettlement(s); err != nil {
		return ledger.KeyInfo{}, err
	}
	r, err := l.read(ctx, key)
	if err != nil {
		return ledger.KeyInfo{}, err
	}
	found := r.info()
	if found.Version != version || found.State != ledger.StateInFlight && found.State != ledger.StateUncertain {
		return ledger.KeyInfo{}, &ledger.SettleRefusedError{Found: found, Version: version}
	}
	var res sql.Result
	if s.Outcome == ledger.NotApplied {
		res, err = l.db.ExecContext(ctx, l.q.settleRelease, l.now(), []byte(key), r.token, r.state, r.goneMS, r.lapsed)
	} else {
		has, status, header, body, encErr := l.encodeStored(key, s.Stored)
		if encErr != nil {
			return ledger.KeyInfo{}, encErr
		}
		res, err = l.db.ExecContext(ctx, l.q.settleComplete, l.now(), []byte(key), r.token, l.ttlMillis, has, status, header, body, r.state, r.goneMS, r.lapsed)
	}
	if err != nil {
		return ledger.KeyInfo{}, unavailable("Settle", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return ledger.KeyInfo{}, unavailable("Settle", key, err)
	}
	now, err := l.read(ctx, key)
	if err != nil {
		return ledger.KeyInfo{}, err
	}
	if n == 0 {
		return ledger.KeyInfo{}, &ledger.SettleRefusedError{Found: now.info(), Version: version}
	}
	return now.info(), nil
}

// Reap implements ledger.Settler: Sweep.
func (l *Ledger) Reap(ctx context.Context, limit int) (int, error) {
	n, err := l.Sweep(ctx, limit)
	return int(n), err
}
