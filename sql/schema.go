package retryfusesql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// This file is the Ledger's schema: the migrations embedded in the
// package, one file per version and dialect, and the table that records
// the version a database is at.

//go:embed migrations
var migrations embed.FS

// ErrSchemaVersion is wrapped by the error of NewLedger for a database
// whose schema this package does not know: a version newer than
// SchemaVersion (written by a later release) or not a version at all. The
// Ledger never uses such a schema.
var ErrSchemaVersion = errors.New("retryfusesql: unknown schema version")

// SchemaVersion is the version of the schema this package writes and
// reads.
const SchemaVersion = 1

// migration is one step of the schema: the statements that take a
// database from version-1 to version.
type migration struct {
	version    int
	statements []string
}

// migrationsOf returns d's migrations, in order, for table.
func migrationsOf(d Dialect, table string) ([]migration, error) {
	dir := path.Join("migrations", d.String())
	entries, err := fs.ReadDir(migrations, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		name := e.Name()
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil || v != len(ms)+1 {
			return nil, fmt.Errorf("retryfusesql: migration %s out of sequence", name)
		}
		b, err := migrations.ReadFile(path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{v, splitStatements(strings.ReplaceAll(string(b), "{{table}}", table))})
	}
	if len(ms) != SchemaVersion {
		return nil, fmt.Errorf("retryfusesql: %d migrations for %s, want %d", len(ms), d, SchemaVersion)
	}
	return ms, nil
}

// splitStatements splits a migration into its statements, each ending
// with a semicolon at the end of a line; comment lines are dropped.
func splitStatements(src string) []string {
	var out []string
	var b strings.Builder
	for line := range strings.Lines(src) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
		if strings.HasSuffix(strings.TrimSpace(line), ";") {
			if s := strings.TrimSpace(b.String()); s != ";" {
				out = append(out, s)
			}
			b.Reset()
		}
	}
	if s := strings.TrimSpace(b.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// migrate brings db's schema for table to SchemaVersion: a missing schema
// is created, an older one migrated, each step in a transaction of its
// own that first locks the version's row, so that processes opening the
// database together migrate it once. A version newer than SchemaVersion,
// or one that is not a version, is an error wrapping ErrSchemaVersion,
// and nothing is changed.
func migrate(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	ms, err := migrationsOf(d, table)
	if err != nil {
		return err
	}
	vt := table + "_schema"
	// Two processes creating the version table at once may collide in
	// PostgreSQL's catalogue even with IF NOT EXISTS: try again.
	for attempt := 0; ; attempt++ {
		_, err = db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+vt+" (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)")
		if err == nil {
			_, err = db.ExecContext(ctx, rebind(d, "INSERT INTO "+vt+" (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"))
		}
		if err == nil || attempt == 2 || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("retryfusesql: create %s: %w", vt, err)
	}
	for {
		done, err := migrateStep(ctx, db, d, vt, ms)
		if err != nil || done {
			return err
		}
	}
}

// migrateStep applies the next migration, if any, in one transaction,
// and reports whether the schema is at SchemaVersion.
func migrateStep(ctx context.Context, db *sql.DB, d Dialect, vt string, ms []migration) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("retryfusesql: migrate: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	// A write first: it takes the row's lock (PostgreSQL) or the
	// database's write lock (SQLite) before the version is read.
	if _, err := tx.ExecContext(ctx, "UPDATE "+vt+" SET version = version WHERE id = 1"); err != nil {
		return false, fmt.Errorf("retryfusesql: migrate: lock %s: %w", vt, err)
	}
	var v int64
	if err := tx.QueryRowContext(ctx, "SELECT version FROM "+vt+" WHERE id = 1").Scan(&v); err != nil {
		return false, fmt.Errorf("retryfusesql: migrate: read %s: %w", vt, err)
	}
	switch {
	case v < 0 || v > SchemaVersion:
		return false, fmt.Errorf("%w: %s holds version %d; this package knows versions up to %d (a later release of it wrote the schema?)",
			ErrSchemaVersion, vt, v, SchemaVersion)
	case v == SchemaVersion:
		return true, tx.Commit()
	}
	m := ms[slices.IndexFunc(ms, func(m migration) bool { return int64(m.version) == v+1 })]
	for _, s := range m.statements {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return false, fmt.Errorf("retryfusesql: migrate to version %d: %w", m.version, err)
		}
	}
	if _, err := tx.ExecContext(ctx, rebind(d, "UPDATE "+vt+" SET version = $1 WHERE id = 1"), m.version); err != nil {
		return false, fmt.Errorf("retryfusesql: migrate to version %d: %w", m.version, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("retryfusesql: migrate to version %d: commit: %w", m.version, err)
	}
	return m.version == SchemaVersion, nil
}
