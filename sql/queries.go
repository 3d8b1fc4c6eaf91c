package retryfusesql

import (
	"regexp"
	"strings"
)

// This file is the Ledger's statements, written once for both dialects
// with PostgreSQL's numbered parameters ($1, $2, ...), which rebind turns
// into SQLite's (?1, ?2, ...). Parameter 1 of every statement is the
// time ({{now}}): NULL, in production, for the database's clock; a
// time from the tests' clock otherwise (see clock in ledger.go).

// queries are a Ledger's statements, for its dialect and table.
type queries struct {
	claim, look, complete, release, uncertain, sweep string
	// inspect, list, settleComplete and settleRelease are an operator's
	// (inspect.go).
	inspect, list, settleComplete, settleRelease string
	// claimLocked is claim in the transactional mode on PostgreSQL; empty
	// on SQLite.
	claimLocked string
}

const (
	// claim inserts a claim for a key that has no row, or takes over a
	// row whose time has passed (an expired row is absent), in one
	// statement: of concurrent claims of a free key, exactly one returns
	// its token. $2 key, $3 fingerprint, $4 token, $5 InFlightTTL and $6
	// TTL in milliseconds.
	claimSQL = `INSERT INTO {{table}} (idem_key, fp, state, token, flight_ms, gone_ms, has_result)
VALUES ($2, $3, 0, $4, {{now}} + $5, {{now}} + $5 + $6, 0)
ON CONFLICT (idem_key) DO UPDATE SET fp = excluded.fp, state = 0, token = excluded.token,
	flight_ms = excluded.flight_ms, gone_ms = excluded.gone_ms, has_result = 0, status = NULL, header = NULL, body = NULL
WHERE {{table}}.gone_ms <= {{now}}
RETURNING token`

	// claimLocked is claim in the transactional mode on PostgreSQL, in the
	// same round trip as the transaction-scoped advisory lock on the key
	// ($7) that keeps a concurrent duplicate from waiting for this
	// transaction: the lock is tried first (lk), the claim made only
	// when it is taken, and the statement returns one row, whether the
	// lock was taken and the token of the claim (NULL when the key has a
	// live row: look reads it). The casts type the parameters of the
	// INSERT … SELECT, which VALUES would take from the columns.
	claimLockedSQL = `WITH lk AS (SELECT pg_try_advisory_xact_lock($7::BIGINT) AS ok),
ins AS (INSERT INTO {{table}} (idem_key, fp, state, token, flight_ms, gone_ms, has_result)
SELECT $2::BYTEA, $3::BYTEA, 0, $4::TEXT, {{now}} + $5::BIGINT, {{now}} + $5::BIGINT + $6::BIGINT, 0 FROM lk WHERE lk.ok
ON CONFLICT (idem_key) DO UPDATE SET fp = excluded.fp, state = 0, token = excluded.token,
	flight_ms = excluded.flight_ms, gone_ms = excluded.gone_ms, has_result = 0, status = NULL, header = NULL, body = NULL
WHERE {{table}}.gone_ms <= {{now}}
RETURNING token)
SELECT lk.ok, (SELECT token FROM ins) FROM lk`

	// look reads a live row; its last column says whether an in-flight
	// claim has expired (lapsed: uncertain).
	lookSQL = `SELECT fp, state, token, has_result, status, header, body, CASE WHEN flight_ms <= {{now}} THEN 1 ELSE 0 END
FROM {{table}} WHERE idem_key = $2 AND gone_ms > {{now}}`

	// complete ends a claim, in flight or uncertain, that $3 owns. $4 TTL,
	// $5 has_result, $6 status, $7 header, $8 body.
	completeSQL = `UPDATE {{table}} SET state = 2, token = '', flight_ms = 0, gone_ms = {{now}} + $4,
	has_result = $5, status = $6, header = $7, body = $8
WHERE idem_key = $2 AND token = $3 AND state IN (0, 1) AND gone_ms > {{now}}`

	// release frees a key whose claim, in flight or uncertain, $3 owns.
	releaseSQL = `DELETE FROM {{table}} WHERE idem_key = $2 AND token = $3 AND state IN (0, 1) AND gone_ms > {{now}}`

	// uncertain holds a claim in flight (or expired: the owner reports
	// late) for TTL ($4) from now.
	uncertainSQL = `UPDATE {{table}} SET state = 1, flight_ms = 0, gone_ms = {{now}} + $4
WHERE idem_key = $2 AND token = $3 AND state = 0 AND gone_ms > {{now}}`

	// sweep deletes at most $2 rows whose time has passed. The outer
	// condition is checked again on a row that a concurrent claim took
	// over meanwhile (PostgreSQL re-reads a row it waited for), so that a
	// row made live again is never deleted; and PostgreSQL skips rows
	// locked by an open transaction (a key claimed in the transactional
	// mode) rather than wait for it.
	// inspect reads a key's live row for an operator, with the
	// statement's time; a key without one gives a row of NULLs but the
	// time.
	inspectSQL = `SELECT n.now, t.fp, t.state, t.token, t.flight_ms, t.gone_ms, t.has_result, t.status,
	CASE WHEN t.flight_ms <= n.now THEN 1 ELSE 0 END
FROM (SELECT {{now}} AS now) n LEFT JOIN {{table}} t ON t.idem_key = $2 AND t.gone_ms > n.now`

	// list reads at most $3 rows whose keys follow $2, in the order of
	// the keys: a range of the primary key, whose time has passed or not.
	listSQL = `SELECT n.now, t.idem_key, t.fp, t.state, t.token, t.flight_ms, t.gone_ms, t.has_result, t.status,
	CASE WHEN t.flight_ms <= n.now THEN 1 ELSE 0 END
FROM (SELECT {{now}} AS now) n JOIN {{table}} t ON t.idem_key > $2
ORDER BY t.idem_key LIMIT $3`

	// settleComplete completes a key as an operator found it: token $3,
	// state $9, expiry $10 and lapsed $11 unchanged. $4..$8 as complete's.
	settleCompleteSQL = `UPDATE {{table}} SET state = 2, token = '', flight_ms = 0, gone_ms = {{now}} + $4,
	has_result = $5, status = $6, header = $7, body = $8
WHERE idem_key = $2 AND token = $3 AND state = $9 AND gone_ms = $10 AND gone_ms > {{now}}
	AND (CASE WHEN flight_ms <= {{now}} THEN 1 ELSE 0 END) = $11`

	// settleRelease frees a key as an operator found it: token $3, state
	// $4, expiry $5 and lapsed $6 unchanged.
	settleReleaseSQL = `DELETE FROM {{table}} WHERE idem_key = $2 AND token = $3 AND state = $4 AND gone_ms = $5 AND gone_ms > {{now}}
	AND (CASE WHEN flight_ms <= {{now}} THEN 1 ELSE 0 END) = $6`

	sweepSQL = `DELETE FROM {{table}} WHERE idem_key IN (SELECT idem_key FROM {{table}} WHERE gone_ms <= {{now}} LIMIT $2{{skiplocked}})
AND gone_ms <= {{now}}`
)

// The dialects' {{now}}: parameter 1 when it is not NULL, else the
// database's clock in milliseconds since the Unix epoch, one reading per
// statement (PostgreSQL's statement_timestamp; SQLite's 'now' is stable
// within a statement).
const (
	postgresNow = `COALESCE($1::BIGINT, (EXTRACT(EPOCH FROM statement_timestamp()) * 1000)::BIGINT)`
	sqliteNow   = `COALESCE($1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))`
)

func newQueries(d Dialect, table string) queries {
	now, skipLocked := postgresNow, " FOR UPDATE SKIP LOCKED"
	if d == SQLite {
		now, skipLocked = sqliteNow, "" // one writer at a time: nothing to skip
	}
	q := func(s string) string {
		return rebind(d, strings.NewReplacer("{{table}}", table, "{{now}}", now, "{{skiplocked}}", skipLocked).Replace(s))
	}
	claimLocked := ""
	if d == Postgres {
		claimLocked = q(claimLockedSQL)
	}
	return queries{
		claimLocked: claimLocked,
		claim:       q(claimSQL),
		look:        q(lookSQL),
		complete:    q(completeSQL),
		release:     q(releaseSQL),
		uncertain:   q(uncertainSQL),
		sweep:       q(sweepSQL),

		inspect:        q(inspectSQL),
		list:           q(listSQL),
		settleComplete: q(settleCompleteSQL),
		settleRelease:  q(settleReleaseSQL),
	}
}

var dollarParam = regexp.MustCompile(`\$([0-9]+)`)

// rebind writes s's numbered parameters in d's form.
func rebind(d Dialect, s string) string {
	if d == SQLite {
		return dollarParam.ReplaceAllString(s, "?$1")
	}
	return s
}
