package retryfuse

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryLedgerEvictsLeastRecentlyUsed(t *testing.T) {
	l, _ := newTestLedger(t, 3)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		ledgerComplete(t, l, k)
	}
	ledgerBegin(t, l, "a", KeyCompleted) // a is now used more recently than b
	ledgerBegin(t, l, "d", KeyNone)      // full: b goes
	assert.Equal(t, 3, l.Len())
	ledgerBegin(t, l, "a", KeyCompleted)
	ledgerBegin(t, l, "c", KeyCompleted)
	ledgerBegin(t, l, "d", KeyInFlight)
	ledgerBegin(t, l, "b", KeyNone) // b was evicted; now a, the least recently used, goes
	ledgerBegin(t, l, "c", KeyCompleted)
	ledgerBegin(t, l, "a", KeyNone) // evicts c, the last completed key
	assert.Equal(t, 3, l.Len())
	_, err := l.Begin(ctx, "e", ledgerFP(1)) // b, d and a are in flight
	assert.ErrorIs(t, err, ErrLedgerFull)
}

func TestMemoryLedgerDropsExpiredBeforeEvicting(t *testing.T) {
	l, clock := newTestLedger(t, 2)
	ledgerComplete(t, l, "old")
	clock.Advance(testLedgerTTL / 2)
	ledgerComplete(t, l, "young")
	ledgerBegin(t, l, "old", KeyCompleted) // old is the most recently used...
	clock.Advance(testLedgerTTL / 2)       // ...but now expired
	ledgerBegin(t, l, "new", KeyNone)
	ledgerBegin(t, l, "young", KeyCompleted)
	assert.Equal(t, 2, l.Len())
}

func TestMemoryLedgerBound(t *testing.T) {
	const maxEntries = 100
	l, _ := newTestLedger(t, maxEntries)
	for i := range 10 * maxEntries {
		ledgerComplete(t, l, "k"+strconv.Itoa(i))
		if got := l.Len(); got > maxEntries {
			t.Fatalf("after %d keys: got Len %d, want at most %d", i+1, got, maxEntries)
		}
	}
	assert.Equal(t, maxEntries, l.Len())
}

func TestMemoryLedgerNeverEvictsInFlight(t *testing.T) {
	l, clock := newTestLedger(t, 2)
	ctx := context.Background()
	a := ledgerBegin(t, l, "a", KeyNone)
	ledgerComplete(t, l, "b")
	ledgerBegin(t, l, "c", KeyNone) // evicts b, the only completed key
	_, err := l.Begin(ctx, "d", ledgerFP(1))
	require.ErrorIs(t, err, ErrLedgerFull)
	assert.Equal(t, 2, l.Len())
	ledgerBegin(t, l, "a", KeyInFlight)
	require.NoError(t, l.Release(ctx, "a", a.Token))
	ledgerBegin(t, l, "d", KeyNone) // room again
	_, err = l.Begin(ctx, "e", ledgerFP(1))
	require.ErrorIs(t, err, ErrLedgerFull)
	clock.Advance(testLedgerInFlightTTL) // the owners of c and d lose their claims
	ledgerBegin(t, l, "e", KeyNone)
	assert.Equal(t, 1, l.Len())
}

// An in-flight claim expires sooner than the completed keys held before it:
// a full ledger must notice, drop it and keep the completed key.
func TestMemoryLedgerSweepSeesSoonerExpiry(t *testing.T) {
	l, clock := newTestLedger(t, 2)
	ledgerComplete(t, l, "a")
	clock.Advance(testLedgerInFlightTTL)
	require.Equal(t, 1, l.Len()) // a sweep: a, expiring in 9m, is the soonest
	ledgerBegin(t, l, "b", KeyNone)
	clock.Advance(testLedgerInFlightTTL)
	ledgerBegin(t, l, "c", KeyNone)
	ledgerBegin(t, l, "a", KeyCompleted)
}

// After a sweep the ledger must still know the soonest expiry of the keys
// left, or a later full ledger evicts a live key instead of an expired one.
func TestMemoryLedgerSweepKeepsSoonestExpiry(t *testing.T) {
	const maxEntries = 10
	l, clock := newTestLedger(t, maxEntries)
	ledgerComplete(t, l, "w") // expires at 10m
	clock.Advance(30 * time.Second)
	ledgerComplete(t, l, "x") // expires at 10m30s
	for i := range maxEntries - 2 {
		clock.Advance(time.Second)
		ledgerComplete(t, l, "y"+strconv.Itoa(i)) // expire after 10m30s
	}
	ledgerBegin(t, l, "x", KeyCompleted) // x is the most recently used; y0 the least
	clock.Advance(testLedgerTTL - 30*time.Second - time.Duration(maxEntries-2)*time.Second)
	ledgerBegin(t, l, "n1", KeyNone) // at 10m: drops w
	clock.Advance(30 * time.Second)
	ledgerBegin(t, l, "n2", KeyNone) // at 10m30s: must drop x, not evict y0
	ledgerBegin(t, l, "y0", KeyCompleted)
	assert.Equal(t, maxEntries, l.Len())
}
