package retryfusesql

import (
	"net/http"
	"sync"
	"testing"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/require"
)

// Two *sql.DB handles on one database behave as two processes: each has
// its own pool of connections, and they share nothing but the database.

func TestConcurrentBeginsOnAFreeKeyHaveOneOwner(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ledgers := []*Ledger{b.newLedger(t, LedgerConfig{}), b.newLedger(t, LedgerConfig{})}
		const n = 40
		for round := range 3 {
			key := "k" + string(rune('a'+round))
			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				states = map[decide.KeyState]int{}
				errs   []error
			)
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					cl, err := ledgers[i%2].Begin(ctx(t), key, fpA)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
						return
					}
					states[cl.State]++
				})
			}
			close(start)
			wg.Wait()
			require.Empty(t, errs)
			require.Equal(t, map[decide.KeyState]int{decide.KeyNone: 1, decide.KeyInFlight: n - 1}, states, "round %d", round)
		}
	})
}

func TestTwoHandlesShareKeysAndTokens(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		one, two := b.newLedger(t, LedgerConfig{}), b.newLedger(t, LedgerConfig{})
		cl := begin(t, one, "k", fpA)
		wantState(t, begin(t, two, "k", fpA), decide.KeyInFlight, false)
		wantState(t, begin(t, two, "k", fpB), decide.KeyConflict, false)
		require.ErrorIs(t, two.Complete(ctx(t), "k", "wrong", nil), ledger.ErrToken)

		res := &ledger.StoredResponse{StatusCode: 201, Header: http.Header{"Location": {"/charges/1"}}, Body: []byte("{}")}
		require.NoError(t, two.Complete(ctx(t), "k", cl.Token, res), "the owner's token is the database's, not the process's")
		got := begin(t, one, "k", fpA)
		wantState(t, got, decide.KeyCompleted, false)
		require.Equal(t, res, got.Stored)
	})
}
