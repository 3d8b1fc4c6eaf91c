package retryfuseredis

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

// These tests run the ledger on the shared 3-master Redis Cluster.

func newClusterLedger(t *testing.T, prefix string) *Ledger {
	t.Helper()
	l, err := NewLedger(clusterClient(t), LedgerConfig{Prefix: prefix, Timeout: testTimeout, AllowWithoutPersistence: true})
	if err != nil {
		t.Fatal(err)
	}
	closeLedger(t, l)
	return l
}

// Every key lives in its marker's slot, and the keys spread over every
// master; claims, results and conflicts work as on one server, for keys of
// every bucket.
func TestLedgerOnCluster(t *testing.T) {
	c := clusterClient(t)
	l := newClusterLedger(t, uniq(t))
	masters := map[string]bool{}
	for i := range 4 * ledgerBuckets {
		key := fmt.Sprintf("key-%d", i)
		rec, marker := c.ClusterKeySlot(bg(), l.Key(key)).Val(), c.ClusterKeySlot(bg(), l.markerKey(bucketOf(key))).Val()
		if rec != marker {
			t.Fatalf("key %q: record in slot %d, marker in slot %d, want one slot", key, rec, marker)
		}
		m, err := c.MasterForKey(bg(), l.Key(key))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true

		cl := begin(t, l, key, fpA)
		wantState(t, cl, decide.KeyNone, false)
		wantState(t, begin(t, l, key, fpB), decide.KeyConflict, false)
		if err := l.Complete(bg(), key, cl.Token, &ledger.StoredResponse{StatusCode: 201, Body: []byte(key)}); err != nil {
			t.Fatal(err)
		}
		cl = begin(t, l, key, fpA)
		wantState(t, cl, decide.KeyCompleted, false)
		if cl.Stored == nil || string(cl.Stored.Body) != key {
			t.Fatalf("key %q: got stored %+v, want its result", key, cl.Stored)
		}
	}
	if len(masters) < 3 {
		t.Fatalf("keys on %d masters, want every one of 3", len(masters))
	}
}

func TestLedgerOneOwnerOnCluster(t *testing.T) {
	prefix := uniq(t)
	ledgers := []*Ledger{newClusterLedger(t, prefix), newClusterLedger(t, prefix)}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		owners = map[string]int{}
	)
	for i := range 32 {
		wg.Go(func() {
			for k := range 8 {
				key := fmt.Sprintf("race-%d", k)
				cl, err := ledgers[i%2].Begin(bg(), key, fpA)
				if err != nil {
					t.Error(err)
					return
				}
				if cl.State == decide.KeyNone {
					mu.Lock()
					owners[key]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for k := range 8 {
		if n := owners[fmt.Sprintf("race-%d", k)]; n != 1 {
			t.Errorf("race-%d: %d owners among 32 Begins on two replicas, want 1", k, n)
		}
	}
}

// Lost data on one master is noticed through the markers of its slots.
func TestLedgerNoticesLostDataOnCluster(t *testing.T) {
	c := clusterClient(t)
	l := newClusterLedger(t, uniq(t))
	begin(t, l, "k", fpA)
	c.Del(bg(), l.Key("k"), l.markerKey(bucketOf("k")))
	wantLost(t, l, "k")
}

// NewLedger checks the persistence of every master.
func TestLedgerChecksPersistenceOnCluster(t *testing.T) {
	if _, err := NewLedger(clusterClient(t), LedgerConfig{Prefix: uniq(t)}); !errors.Is(err, retryfuse.ErrInvalidPolicy) {
		t.Fatalf("NewLedger on a cluster without AOF: got %v, want an error wrapping ErrInvalidPolicy", err)
	}
}
