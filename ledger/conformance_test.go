package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/internal/testclock"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/retryfuse/retryfuse/ledger/ledgertest"
)

// clockedMemory is a Memory whose every method runs at a virtual clock's
// time.
type clockedMemory struct {
	*ledger.Memory
	clock *testclock.Clock
}

func (l clockedMemory) Begin(_ context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, error) {
	return l.BeginAt(key, fp, l.clock.Now())
}

func (l clockedMemory) Complete(_ context.Context, key, token string, res *ledger.StoredResponse) error {
	return l.CompleteCopyAt(key, token, res, l.clock.Now())
}

func (l clockedMemory) Release(_ context.Context, key, token string) error {
	return l.ReleaseAt(key, token, l.clock.Now())
}

func (l clockedMemory) Uncertain(_ context.Context, key, token string) error {
	return l.UncertainAt(key, token, l.clock.Now())
}

func (l clockedMemory) Lookup(_ context.Context, key string) (ledger.KeyInfo, error) {
	return l.LookupAt(key, l.clock.Now()), nil
}

func (l clockedMemory) List(_ context.Context, q ledger.Query) (ledger.Page, error) {
	return l.ListAt(q, l.clock.Now())
}

func (l clockedMemory) Settle(_ context.Context, key, version string, s ledger.Settlement) (ledger.KeyInfo, error) {
	return l.SettleAt(key, version, s, l.clock.Now())
}

func (l clockedMemory) Reap(_ context.Context, limit int) (int, error) {
	return l.ReapAt(limit, l.clock.Now()), nil
}

func TestMemoryConformsOnItsClock(t *testing.T) {
	clock := testclock.At(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ledgertest.Run(t, func(t testing.TB, cfg ledgertest.Config) ledger.Ledger {
		return clockedMemory{&ledger.Memory{TTL: cfg.TTL, InFlightTTL: cfg.InFlightTTL, MaxStoredBody: cfg.MaxStoredBody}, clock}
	}, ledgertest.Options{Advance: clock.Advance})
}
