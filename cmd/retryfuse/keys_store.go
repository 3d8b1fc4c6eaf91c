package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"regexp"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // --driver postgres
	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse/ledger"
	retryfuseredis "github.com/retryfuse/retryfuse/redis"
	retryfusesql "github.com/retryfuse/retryfuse/sql"
	_ "modernc.org/sqlite" // --driver sqlite
)

// This file opens the store that "retryfuse keys" reads: a Redis or a
// SQL ledger, as an Inspector and Settler.

// storeFlags name the store.
type storeFlags struct {
	redisAddr, prefix  string
	dsn, driver, table string
	ttl, inFlightTTL   time.Duration
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.redisAddr, "redis", "", "")
	fs.StringVar(&s.prefix, "prefix", "", "")
	fs.StringVar(&s.dsn, "sql", "", "")
	fs.StringVar(&s.driver, "driver", "", "")
	fs.StringVar(&s.table, "table", "", "")
	fs.DurationVar(&s.ttl, "ttl", 24*time.Hour, "")
	fs.DurationVar(&s.inFlightTTL, "in-flight-ttl", 5*time.Minute, "")
}

func (s *storeFlags) check() error {
	switch {
	case (s.redisAddr == "") == (s.dsn == ""):
		return usagef("one store is required: --redis ADDR or --sql DSN")
	case s.redisAddr != "" && (s.driver != "" || s.table != ""):
		return usagef("--driver and --table go with --sql")
	case s.dsn != "" && s.prefix != "":
		return usagef("--prefix goes with --redis")
	case s.dsn != "" && s.driver != "postgres" && s.driver != "sqlite":
		return usagef("--driver postgres or --driver sqlite is required with --sql")
	case s.ttl <= 0 || s.inFlightTTL <= 0:
		return usagef("--ttl and --in-flight-ttl must be positive")
	}
	return nil
}

// store is an opened ledger.
type store interface {
	ledger.Inspector
	ledger.Settler
}

// open opens the store; close releases it.
func (s *storeFlags) open(ctx context.Context) (st store, closeFn func(), err error) {
	if s.redisAddr != "" {
		client := redis.NewClient(&redis.Options{Addr: s.redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
		if err := s.redisLedgerExists(ctx, client); err != nil {
			_ = client.Close()
			return nil, nil, err
		}
		l, err := retryfuseredis.NewLedger(client, retryfuseredis.LedgerConfig{
			Prefix:      s.prefix,
			TTL:         s.ttl,
			InFlightTTL: s.inFlightTTL,
			Timeout:     5 * time.Second,
			// The command claims no key: whether the server persists its
			// data is the services' concern, not a reader's.
			AllowWithoutPersistence: true,
		})
		if err != nil {
			_ = client.Close()
			return nil, nil, fmt.Errorf("redis %s: %w", s.redisAddr, err)
		}
		return l, func() {
			c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = l.Close(c)
			_ = client.Close()
		}, nil
	}
	driver, dialect := "pgx", retryfusesql.Postgres
	if s.driver == "sqlite" {
		driver, dialect = "sqlite", retryfusesql.SQLite
	}
	db, err := sql.Open(driver, s.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", s.driver, err)
	}
	if err := s.sqlLedgerExists(ctx, db); err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	l, err := retryfusesql.NewLedger(ctx, db, retryfusesql.LedgerConfig{
		Dialect:     dialect,
		Table:       s.table,
		TTL:         s.ttl,
		InFlightTTL: s.inFlightTTL,
	})
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("%s: %w", s.driver, err)
	}
	return l, func() { _ = db.Close() }, nil
}

// The command reads a ledger that services made; it never makes one. A
// ledger's constructor makes what it misses (a SQL table and its schema,
// a Redis prefix's markers), so that a mistyped --table, --prefix or
// database file would be answered with an empty ledger made on the spot
// ("0 stuck keys"): the store is checked first.

// redisLedgerExists reports an error unless Redis holds a marker of the
// ledger under the prefix (a Ledger writes its 64 markers when it starts).
func (s *storeFlags) redisLedgerExists(ctx context.Context, client *redis.Client) error {
	prefix := s.prefix
	if prefix == "" {
		prefix = retryfuseredis.DefaultLedgerPrefix
	}
	markers := make([]string, ledgerBuckets)
	for b := range markers {
		markers[b] = fmt.Sprintf("%s{%02x}", prefix, b)
	}
	n, err := client.Exists(ctx, markers...).Result()
	if err != nil {
		return fmt.Errorf("redis %s: %w", s.redisAddr, err)
	}
	if n == 0 {
		return fmt.Errorf("redis %s: no ledger under prefix %q (no Ledger has used it, or Redis lost its data): check --redis and --prefix", s.redisAddr, prefix)
	}
	return nil
}

// ledgerBuckets is the number of hash tags a Redis ledger spreads its
// keys over, each with a marker: prefix, "{", two hex digits, "}".
const ledgerBuckets = 64

// sqlTable is the form of a table name the SQL ledger accepts (it is
// written into statements as it is).
var sqlTable = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,49}$`)

// sqlLedgerExists reports an error unless db holds the ledger's schema
// version table for the table named.
func (s *storeFlags) sqlLedgerExists(ctx context.Context, db *sql.DB) error {
	table := s.table
	if table == "" {
		table = retryfusesql.DefaultTable
	}
	if !sqlTable.MatchString(table) {
		return nil // NewLedger refuses it, and says why
	}
	var version int64
	if err := db.QueryRowContext(ctx, "SELECT version FROM "+table+"_schema WHERE id = 1").Scan(&version); err != nil {
		return fmt.Errorf("%s: no ledger table %q could be read in this database (%v): check --sql and --table", s.driver, table, err)
	}
	return nil
}
