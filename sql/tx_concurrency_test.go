package retryfusesql

import (
	"context"
	"database/sql"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/stretchr/testify/require"
)

func TestTxConcurrentRequestsOnOneKeyCommitOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		var servers []string
		var dbs []*sql.DB
		for range 2 { // two servers, each with a pool of its own
			db := b.open(t)
			db.SetMaxOpenConns(20)
			dbs = append(dbs, db)
			servers = append(servers, txServer(t, b.ledgerOn(t, db, LedgerConfig{}).Transactional(), e, idempotency.Config{}).URL)
		}
		const n = 100
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
		defer client.CloseIdleConnections()
		statuses := postConcurrently(t, client, servers, "k1", n)
		require.Equal(t, int64(1), e.count(t, dbs[0], "k1"), "effects committed (statuses %v)", statuses)
		require.Equal(t, 1, statuses["Created "], "first responses (statuses %v)", statuses)
		require.Equal(t, n, statuses["Created "]+statuses["Created true"]+statuses["Conflict "], "statuses %v", statuses)
		require.Equal(t, int64(1), e.runs.Load(), "the handler ran more than once (statuses %v)", statuses)
		got, err := postTo(ctx(t), client, servers[0], "k1", "x")
		require.NoError(t, err)
		require.Equal(t, result{201, "true", "1", "created"}, got)
	})
}

func TestTxDuplicateWhileTheFirstRuns(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		e := newEffects(t, b)
		entered, release := make(chan struct{}), make(chan struct{})
		e.after = func(http.ResponseWriter, *http.Request, int64) bool {
			close(entered)
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
			return false
		}
		srv := txServer(t, b.newLedger(t, LedgerConfig{}).Transactional(), e, idempotency.Config{})
		first, c := make(chan result, 1), ctx(t)
		go func() { got, _ := postTo(c, srv.Client(), srv.URL, "k1", "x"); first <- got }()
		<-entered
		if b.dialect == Postgres {
			// The duplicate is answered while the first's transaction is
			// open, not after it.
			c, cancel := context.WithTimeout(c, 10*time.Second)
			got, err := postTo(c, srv.Client(), srv.URL, "k1", "x")
			cancel()
			require.NoError(t, err)
			require.Equal(t, http.StatusConflict, got.status)
			require.Contains(t, got.body, idempotency.ProblemInFlight)
			close(release)
		} else {
			// SQLite serialises writers: the duplicate waits for the
			// first's commit, and is answered with its response.
			dup := make(chan result, 1)
			go func() { got, _ := postTo(c, srv.Client(), srv.URL, "k1", "x"); dup <- got }()
			close(release)
			require.Equal(t, result{201, "true", "1", "created"}, <-dup)
		}
		require.Equal(t, result{201, "", "1", "created"}, <-first)
		require.Equal(t, int64(1), e.runs.Load())
	})
}

// postConcurrently sends n keyed POSTs under key at once, spread over
// servers in turn, and counts their answers by status and replay marker
// ("Created ", "Created true", "Conflict ", or "error ...").
func postConcurrently(t *testing.T, client *http.Client, servers []string, key string, n int) map[string]int {
	t.Helper()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[string]int{}
	)
	start, c := make(chan struct{}), ctx(t)
	for i := range n {
		wg.Go(func() {
			<-start
			got, err := postTo(c, client, servers[i%len(servers)], key, "x")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				statuses["error "+err.Error()]++
				return
			}
			statuses[http.StatusText(got.status)+" "+got.replayed]++
		})
	}
	close(start)
	wg.Wait()
	t.Logf("statuses: %v", statuses)
	return statuses
}
