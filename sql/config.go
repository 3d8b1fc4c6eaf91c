package retryfusesql

import (
	"fmt"
	"time"

	"github.com/retryfuse/retryfuse"
)

// Dialect names the SQL spoken by the database a Ledger keeps its keys
// in.
type Dialect uint8

const (
	// Postgres is PostgreSQL (12 or later), for instance through pgx's
	// database/sql driver (github.com/jackc/pgx/v5/stdlib).
	Postgres Dialect = iota + 1
	// SQLite is SQLite (3.35 or later: RETURNING), for instance through
	// the pure-Go driver modernc.org/sqlite. Open the database with a
	// busy timeout (modernc.org/sqlite: "_pragma=busy_timeout(5000)"), so
	// that a writer waits for another rather than fail at once.
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", uint8(d))
}

// Defaults of LedgerConfig, those of ledger.Memory's settings.
const (
	DefaultTable               = "retryfuse_keys"
	defaultLedgerTTL           = 24 * time.Hour
	defaultLedgerInFlightTTL   = 5 * time.Minute
	defaultLedgerMaxStoredBody = 64 << 10
	defaultSweepEvery          = 100
	defaultSweepLimit          = 1000
)

// LedgerConfig configures a Ledger. Every zero value but Dialect's means
// the default given; a negative value is invalid.
type LedgerConfig struct {
	// Dialect is the database's: Postgres or SQLite. It must be set.
	Dialect Dialect
	// Table is the name of the table of keys; the table of its schema's
	// version is named Table + "_schema". Empty means DefaultTable. It is
	// 1 to 50 lower-case ASCII letters, digits and underscores, beginning
	// with a letter or an underscore. Ledgers with different tables in one
	// database keep their keys apart.
	Table string
	// TTL is how long a completed or uncertain key is kept, from Complete
	// or Uncertain, or from the expiry of a claim never ended. Zero means
	// 24h. Afterwards the key is free again.
	TTL time.Duration
	// InFlightTTL is how long an owner may hold a key, from Begin. Zero
	// means 5m. A claim not ended by then is uncertain for TTL, never free:
	// the request may have been applied and its result never recorded. Set
	// it above the longest a call (all its attempts and waits) may take.
	InFlightTTL time.Duration
	// MaxStoredBody bounds the bytes of body stored per completed key. Zero
	// means 64 KiB. A longer body, or headers of more than 100 values or
	// 32 KiB of names and values (the bounds of ledger.Memory),
	// complete the key without a stored result: a later call under the key
	// is not replayed, and the transport asks the caller to reconcile.
	MaxStoredBody int
	// SweepEvery is how many Begins of this Ledger pass between two
	// sweeps of expired keys (see Ledger.Sweep), each run by the Begin
	// whose turn it is, after its claim. Zero means 100.
	SweepEvery int
	// SweepLimit bounds the keys one sweep deletes. Zero means 1000.
	SweepLimit int
}

func (c *LedgerConfig) validate() error {
	switch {
	case c.Dialect != Postgres && c.Dialect != SQLite:
		return invalid("LedgerConfig.Dialect", "must be Postgres or SQLite")
	case c.Table != "" && !validTable(c.Table):
		return invalid("LedgerConfig.Table", fmt.Sprintf("%q is not 1 to 50 of [a-z0-9_], beginning with a letter or _", c.Table))
	case c.TTL < 0:
		return invalid("LedgerConfig.TTL", "must not be negative")
	case c.InFlightTTL < 0:
		return invalid("LedgerConfig.InFlightTTL", "must not be negative")
	case c.MaxStoredBody < 0:
		return invalid("LedgerConfig.MaxStoredBody", "must not be negative")
	case c.SweepEvery < 0:
		return invalid("LedgerConfig.SweepEvery", "must not be negative")
	case c.SweepLimit < 0:
		return invalid("LedgerConfig.SweepLimit", "must not be negative")
	}
	return nil
}

// validTable reports whether t is a table name the Ledger accepts: it is
// written into statements as it is, so it must need no quoting.
func validTable(t string) bool {
	if len(t) == 0 || len(t) > 50 || (t[0] >= '0' && t[0] <= '9') {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func invalid(field, problem string) error {
	return fmt.Errorf("%w: retryfusesql: %s %s", retryfuse.ErrInvalidPolicy, field, problem)
}

func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}
