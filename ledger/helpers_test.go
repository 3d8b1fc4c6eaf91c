package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/testclock"
	"github.com/stretchr/testify/require"
)

const (
	testLedgerTTL         = 10 * time.Minute
	testLedgerInFlightTTL = time.Minute
	testLedgerMaxBody     = 8
)

// testLedger is a Memory on a fake clock: its methods run at the
// clock's time.
type testLedger struct {
	*Memory
	clock *fakeClock
}

func (l testLedger) Begin(_ context.Context, key string, fp Fingerprint) (Claim, error) {
	return l.BeginAt(key, fp, l.clock.Now())
}

func (l testLedger) Complete(_ context.Context, key, token string, res *StoredResponse) error {
	return l.completeAt(key, token, res, l.clock.Now())
}

func (l testLedger) Release(_ context.Context, key, token string) error {
	return l.ReleaseAt(key, token, l.clock.Now())
}

func (l testLedger) Uncertain(_ context.Context, key, token string) error {
	return l.UncertainAt(key, token, l.clock.Now())
}

func (l testLedger) len() int { return l.lenAt(l.clock.Now()) }

// newTestLedger returns a Memory with the test settings above on a
// fake clock of its own, which starts at a fixed time: tests move it,
// nothing sleeps.
func newTestLedger(t testing.TB, maxEntries int) (testLedger, *fakeClock) {
	t.Helper()
	l, err := newMemory(&Memory{
		MaxEntries:    maxEntries,
		TTL:           testLedgerTTL,
		InFlightTTL:   testLedgerInFlightTTL,
		MaxStoredBody: testLedgerMaxBody,
	})
	require.NoError(t, err)
	clock := newFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return testLedger{l, clock}, clock
}

func ledgerFP(b byte) Fingerprint { return Fingerprint{b} }

// newMemory returns l, and the error its settings give.
func newMemory(l *Memory) (*Memory, error) { return l, l.Validate() }

// fakeClock is the tests' virtual clock.
type fakeClock = testclock.Clock

func newFakeClockAt(start time.Time) *fakeClock { return testclock.At(start) }

func ledgerBegin(t *testing.T, l Ledger, key string, want decide.KeyState) Claim {
	t.Helper()
	c, err := l.Begin(context.Background(), key, ledgerFP(1))
	require.NoError(t, err)
	require.Equal(t, want, c.State, "Begin(%q): got %s, want %s", key, c.State, want)
	return c
}

func ledgerComplete(t *testing.T, l Ledger, key string) {
	t.Helper()
	c := ledgerBegin(t, l, key, decide.KeyNone)
	require.NoError(t, l.Complete(context.Background(), key, c.Token, &StoredResponse{StatusCode: 200}))
}
