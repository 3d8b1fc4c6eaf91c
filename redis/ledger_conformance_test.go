package retryfuseredis

import (
	"context"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/ledger"
	"github.com/retryfuse/retryfuse/ledger/ledgertest"
)

// suiteConfig is the Ledger's configuration for the suite's settings.
func suiteConfig(t testing.TB, cfg ledgertest.Config) LedgerConfig {
	return LedgerConfig{
		Prefix:                  uniq(t),
		TTL:                     cfg.TTL,
		InFlightTTL:             cfg.InFlightTTL,
		MaxStoredBody:           cfg.MaxStoredBody,
		Timeout:                 testTimeout,
		AllowWithoutPersistence: true, // the test servers keep nothing
	}
}

// TestLedgerConforms runs the conformance suite on the shared server, on
// its clock: the suite waits for the TTLs it asks for.
func TestLedgerConforms(t *testing.T) {
	ledgertest.Run(t, func(t testing.TB, cfg ledgertest.Config) ledger.Ledger {
		l, err := NewLedger(sharedClient(t), suiteConfig(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		closeLedger(t, l)
		return l
	}, ledgertest.Options{Unavailable: func(t testing.TB, cfg ledgertest.Config) ledger.Ledger {
		s := startServer(t)
		l, err := NewLedger(newClient(t, s.Addr()), suiteConfig(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_ = l.Close(ctx) // Redis is down: what is queued cannot be flushed
		})
		s.Stop()
		return l
	}})
}

// TestLedgerConformsOnACluster runs the suite on the shared 3-master
// Redis Cluster: List scans every master.
func TestLedgerConformsOnACluster(t *testing.T) {
	ledgertest.Run(t, func(t testing.TB, cfg ledgertest.Config) ledger.Ledger {
		l, err := NewLedger(clusterClient(t), suiteConfig(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		closeLedger(t, l)
		return l
	}, ledgertest.Options{})
}
