package ledger

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryLedgerEvictsLeastRecentlyUsed(t *testing.T) {
	l, _ := newTestLedger(t, 3)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		ledgerComplete(t, l, k)
	}
	ledgerBegin(t, l, "a", decide.KeyCompleted) // a is now used more recently than b
	ledgerBegin(t, l, "d", decide.KeyNone)      // full: b goes
	assert.Equal(t, 3, l.len())
	ledgerBegin(t, l, "a", decide.KeyCompleted)
	ledgerBegin(t, l, "c", decide.KeyCompleted)
	ledgerBegin(t, l, "d", decide.KeyInFlight)
	ledgerBegin(t, l, "b", decide.KeyNone) // b was evicted; now a, the least recently used, goes
	ledgerBegin(t, l, "c", decide.KeyCompleted)
	ledgerBegin(t, l, "a", decide.KeyNone) // evicts c, the last completed key
	assert.Equal(t, 3, l.len())
	_, err := l.Begin(ctx, "e", ledgerFP(1)) // b, d and a are in flight
	assert.ErrorIs(t, err, errFull)
}

func TestMemoryLedgerDropsExpiredBeforeEvicting(t *testing.T) {
	l, clock := newTestLedger(t, 2)
	ledgerComplete(t, l, "old")
	clock.Advance(testLedgerTTL / 2)
	ledgerComplete(t, l, "young")
	ledgerBegin(t, l, "old", decide.KeyCompleted) // old is the most recently used...
	clock.Advance(testLedgerTTL / 2)              // ...but now expired
	ledgerBegin(t, l, "new", decide.KeyNone)
	ledgerBegin(t, l, "young", decide.KeyCompleted)
	assert.Equal(t, 2, l.len())
}

func TestMemoryLedgerBound(t *testing.T) {
	const maxEntries = 100
	l, _ := newTestLedger(t, maxEntries)
	for i := range 10 * maxEntries {
		ledgerComplete(t, l, "k"+strconv.Itoa(i))
		if got := l.len(); got > maxEntries {
			t.Fatalf("after %d keys: got Len %d, want at most %d", i+1, got, maxEntries)
		}
	}
	assert.Equal(t, maxEntries, l.len())
}

func TestMemoryLedgerNeverEvictsInFlight(t *testing.T) {
	l, clock := newTestLedger(t, 2)
	ctx := context.Background()
	a := ledgerBegin(t, l, "a", decide.KeyNone)
	ledgerComplete(t, l, "b")
	ledgerBegin(t, l, "c", decide.KeyNone) // evicts b, the only completed key
	_, err := l.Begin(ctx, "d", ledgerFP(1))
	require.ErrorIs(t, err, errFull)
	assert.Equal(t, 2, l.len())
	ledgerBegin(t, l, "a", decide.KeyInFlight)
	require.NoError(t, l.Release(ctx, "a", a.Token))
	ledgerBegin(t, l, "d", decide.KeyNone) // room again
	_, err = l.Begin(ctx, "e", ledgerFP(1))
	require.ErrorIs(t, err, errFull)
	clock.Advance(testLedgerInFlightTTL) // the claims on c and d expire: both uncertain, so evictable
	ledgerBegin(t, l, "e", decide.KeyNone)
	assert.Equal(t, 2, l.len())
}

// A claim expires (uncertain) and then, TTL later, goes, sooner than a
// completed key taken after it: a full ledger must notice, drop it and
// keep the completed key.
func TestMemoryLedgerSweepSeesSoonerExpiry(t *testing.T) {
	l, clock := newTestLedger(t, 2)
	ledgerBegin(t, l, "b", decide.KeyNone) // in flight until 1m, uncertain until 11m
	clock.Advance(2 * testLedgerInFlightTTL)
	ledgerComplete(t, l, "a") // until 12m
	require.Equal(t, 2, l.len())
	ledgerBegin(t, l, "b", decide.KeyInFlight) // uncertain now
	clock.Advance(testLedgerTTL - testLedgerInFlightTTL)
	ledgerBegin(t, l, "c", decide.KeyNone) // at 11m: must drop b, not evict a
	ledgerBegin(t, l, "a", decide.KeyCompleted)
}

// A full ledger whose every key is in flight makes room once a claim
// expires: the key is uncertain then, and evictable, never free while held.
func TestMemoryLedgerExpiredClaimsAreUncertain(t *testing.T) {
	l, clock := newTestLedger(t, 2)
	ledgerBegin(t, l, "a", decide.KeyNone)
	clock.Advance(testLedgerInFlightTTL)
	cl, err := l.Begin(context.Background(), "a", ledgerFP(1))
	require.NoError(t, err)
	assert.Equal(t, decide.KeyInFlight, cl.State)
	assert.True(t, cl.Uncertain, "an expired claim: got not uncertain, want uncertain")
	assert.NotEmpty(t, cl.Token, "an expired claim keeps its owner's token for Resolve")
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
	ledgerBegin(t, l, "x", decide.KeyCompleted) // x is the most recently used; y0 the least
	clock.Advance(testLedgerTTL - 30*time.Second - time.Duration(maxEntries-2)*time.Second)
	ledgerBegin(t, l, "n1", decide.KeyNone) // at 10m: drops w
	clock.Advance(30 * time.Second)
	ledgerBegin(t, l, "n2", decide.KeyNone) // at 10m30s: must drop x, not evict y0
	ledgerBegin(t, l, "y0", decide.KeyCompleted)
	assert.Equal(t, maxEntries, l.len())
}
