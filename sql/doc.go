// Package retryfusesql keeps retryfuse's idempotency-key ledger in a SQL
// database (PostgreSQL or SQLite, through database/sql), so that every
// replica of a service that opens the same database shares it, and so
// that a server whose effects live in that database can claim a key, apply
// its effect and record its response in one transaction (see TxLedger).
//
//	db, _ := sql.Open("pgx", dsn) // github.com/jackc/pgx/v5/stdlib
//	ledger, err := retryfusesql.NewLedger(ctx, db, retryfusesql.LedgerConfig{Dialect: retryfusesql.Postgres})
//	h, err := idempotency.New(mux, idempotency.Config{Ledger: ledger})
//
// Where the handler's effects live in the same database, give the
// middleware ledger.Transactional() (a TxLedger): the key's claim, the
// effects the handler writes in idempotency.Tx(r.Context()) and its
// recorded response then commit in one transaction, so that a crash
// anywhere before the commit leaves nothing (the key free, the effect
// absent) and a repeat after it gets the stored response.
//
// The package imports no driver: register the one you use (pgx's stdlib,
// modernc.org/sqlite, or another) and say which SQL it speaks in
// LedgerConfig.Dialect.
//
// # Operating it
//
// The Ledger is a ledger.Inspector and a ledger.Settler: Lookup reads a
// key, List pages through the keys by state and age (a keyset page of the
// primary key, LIMITed), Settle records a stuck key's outcome on the
// version an operator saw, Reap deletes expired rows. The command
// "retryfuse keys --sql DSN --driver postgres|sqlite" drives them.
//
// # Schema
//
// NewLedger creates the table of keys (LedgerConfig.Table, "retryfuse_keys"
// unless set) and a table of its schema's version (Table + "_schema")
// when they are missing, and migrates an older version; it refuses a
// version it does not know (ErrSchemaVersion) rather than use it. The
// migrations are embedded in the package (migrations/<dialect>/).
package retryfusesql
