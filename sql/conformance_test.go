package retryfusesql

import (
	"context"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
	"github.com/retryfuse/retryfuse/ledger/ledgertest"
)

// onTable returns a Ledger on a table of its own in b's database, made
// with the suite's settings, its table dropped when the test ends.
func (b *backend) onTable(t testing.TB, cfg ledgertest.Config) (*Ledger, *backend) {
	t.Helper()
	own := *b
	own.table = uniqTable(t)
	l := own.newLedger(t, LedgerConfig{TTL: cfg.TTL, InFlightTTL: cfg.InFlightTTL, MaxStoredBody: cfg.MaxStoredBody})
	if b.dialect == Postgres {
		db := own.open(t)
		t.Cleanup(func() {
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = db.ExecContext(c, "DROP TABLE IF EXISTS "+own.table+", "+own.table+"_schema")
		})
	}
	return l, &own
}

// unavailableOn returns a Ledger on b's database whose handle is then
// closed: every statement fails.
func (b *backend) unavailableOn(t testing.TB, cfg ledgertest.Config) ledger.Ledger {
	t.Helper()
	own := *b
	own.table = uniqTable(t)
	db := own.open(t)
	l := own.ledgerOn(t, db, LedgerConfig{TTL: cfg.TTL, InFlightTTL: cfg.InFlightTTL, MaxStoredBody: cfg.MaxStoredBody})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if b.dialect == Postgres {
		admin := own.open(t)
		t.Cleanup(func() {
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = admin.ExecContext(c, "DROP TABLE IF EXISTS "+own.table+", "+own.table+"_schema")
		})
	}
	return l
}

func TestLedgerConformsOnATestClock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clock := newFakeClock()
		ledgertest.Run(t, func(t testing.TB, cfg ledgertest.Config) ledger.Ledger {
			l, _ := b.onTable(t, cfg)
			l.setClock(clock.now)
			return l
		}, ledgertest.Options{Advance: clock.advance, Unavailable: b.unavailableOn})
	})
}

func TestLedgerConformsOnTheDatabasesClock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ledgertest.Run(t, func(t testing.TB, cfg ledgertest.Config) ledger.Ledger {
			l, _ := b.onTable(t, cfg)
			return l
		}, ledgertest.Options{})
	})
}
