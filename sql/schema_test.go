package retryfusesql

import (
	"database/sql"
	"sync"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/require"
)

func schemaVersion(t testing.TB, db *sql.DB, table string) int64 {
	t.Helper()
	var v int64
	require.NoError(t, db.QueryRowContext(ctx(t), "SELECT version FROM "+table+"_schema WHERE id = 1").Scan(&v))
	return v
}

func TestNewLedgerCreatesTheSchemaOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		db := b.open(t)
		l := b.ledgerOn(t, db, LedgerConfig{})
		require.Equal(t, int64(SchemaVersion), schemaVersion(t, db, b.table))
		cl := begin(t, l, "k", fpA)
		again := b.ledgerOn(t, db, LedgerConfig{}) // the schema is there: used as it is
		wantState(t, begin(t, again, "k", fpA), decide.KeyInFlight, false)
		require.NoError(t, again.Release(ctx(t), "k", cl.Token))
	})
}

func TestConcurrentNewLedgersMigrateOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			db := b.open(t)
			wg.Go(func() {
				_, errs[i] = NewLedger(ctx(t), db, LedgerConfig{Dialect: b.dialect, Table: b.table})
			})
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "NewLedger %d", i)
		}
		require.Equal(t, int64(SchemaVersion), schemaVersion(t, b.open(t), b.table))
	})
}

func TestOlderSchemaIsMigrated(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		db := b.open(t)
		// Version 0: the version table alone, as a process that died
		// before its first migration left it.
		_, err := db.ExecContext(ctx(t), "CREATE TABLE "+b.table+"_schema (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)")
		require.NoError(t, err)
		_, err = db.ExecContext(ctx(t), "INSERT INTO "+b.table+"_schema (id, version) VALUES (1, 0)")
		require.NoError(t, err)
		l := b.ledgerOn(t, db, LedgerConfig{})
		require.Equal(t, int64(SchemaVersion), schemaVersion(t, db, b.table))
		wantState(t, begin(t, l, "k", fpA), decide.KeyNone, false)
	})
}

func TestUnknownSchemaVersionIsRefused(t *testing.T) {
	for _, v := range []int64{SchemaVersion + 1, -1} {
		eachBackend(t, func(t *testing.T, b *backend) {
			db := b.open(t)
			l := b.ledgerOn(t, db, LedgerConfig{})
			cl := begin(t, l, "k", fpA)
			_, err := db.ExecContext(ctx(t), rebind(b.dialect, "UPDATE "+b.table+"_schema SET version = $1"), v)
			require.NoError(t, err)

			_, err = NewLedger(ctx(t), b.open(t), LedgerConfig{Dialect: b.dialect, Table: b.table})
			require.ErrorIs(t, err, ErrSchemaVersion, "version %d", v)
			require.NotErrorIs(t, err, ledger.ErrUnavailable, "a refusal, not an outage")
			require.Equal(t, v, schemaVersion(t, db, b.table), "the refusal changed the version")
			wantState(t, begin(t, l, "k", fpA), decide.KeyInFlight, false) // and the keys are untouched
			require.NoError(t, l.Release(ctx(t), "k", cl.Token))
		})
	}
}

func TestKeysTableWithoutVersionIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		db := b.open(t)
		_, err := db.ExecContext(ctx(t), "CREATE TABLE "+b.table+" (idem_key TEXT PRIMARY KEY)")
		require.NoError(t, err)
		_, err = NewLedger(ctx(t), db, LedgerConfig{Dialect: b.dialect, Table: b.table})
		require.Error(t, err, "a table of that name not made by the migrations is never used")
		require.Equal(t, int64(0), schemaVersion(t, db, b.table))
	})
}
