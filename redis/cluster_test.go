package retryfuseredis

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
)

// TestClusterSmoke pins that the shared cluster serves a budget: keys of
// several slots, each answered by its master, and a token bucket that
// refuses once its tokens are spent.
func TestClusterSmoke(t *testing.T) {
	c := clusterClient(t)
	ctx := context.Background()
	var masters atomic.Int32
	if err := c.ForEachMaster(ctx, func(context.Context, *redis.Client) error {
		masters.Add(1) // called concurrently
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := masters.Load(); n < 3 {
		t.Fatalf("cluster has %d masters, want at least 3", n)
	}
	b, err := newTokenBucket(c, "smoke", budget.TokenBucketConfig{Capacity: 2, Refill: 1e-9}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false} {
		if ok := leaseOne(t, b.s); ok != want {
			t.Fatalf("lease %d: got %v, want %v", i, ok, want)
		}
	}
}

// TestClusterAndRingClientsChecked pins that every constructor refuses a
// cluster client or ring that a context could not bound, and typed nils of
// each client type.
func TestClusterAndRingClientsChecked(t *testing.T) {
	noCtx := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = noCtx.Close() })
	var (
		nilClient  *redis.Client
		nilCluster *redis.ClusterClient
		nilRing    *redis.Ring
	)
	for name, c := range map[string]redis.UniversalClient{
		"cluster without ContextTimeoutEnabled": noCtx,
		"typed nil *redis.Client":               nilClient,
		"typed nil *redis.ClusterClient":        nilCluster,
		"typed nil *redis.Ring":                 nilRing,
	} {
		if _, err := NewRatioBudget(c, "n", budget.RatioConfig{}, BudgetOptions{}); !errors.Is(err, retryfuse.ErrInvalidPolicy) {
			t.Errorf("NewRatioBudget, %s: got %v, want an error wrapping ErrInvalidPolicy", name, err)
		}
		if _, err := NewTokenBucket(c, "n", budget.TokenBucketConfig{}, BudgetOptions{}); !errors.Is(err, retryfuse.ErrInvalidPolicy) {
			t.Errorf("NewTokenBucket, %s: got %v, want an error wrapping ErrInvalidPolicy", name, err)
		}
		if _, err := NewLedger(c, LedgerConfig{}); !errors.Is(err, retryfuse.ErrInvalidPolicy) {
			t.Errorf("NewLedger, %s: got %v, want an error wrapping ErrInvalidPolicy", name, err)
		}
	}
}

// TestClusterBudgetsShare runs two processes' ratio budgets, and a token
// bucket, on the cluster: deposits made through one are leased through the
// other, and Close flushes.
func TestClusterBudgetsShare(t *testing.T) {
	prefix := uniq(t)
	cfg := budget.RatioConfig{Ratio: 1, MinPerSecond: -1, Window: 10 * time.Second}
	opts := BudgetOptions{Prefix: prefix, Timeout: testTimeout, SyncInterval: time.Hour}
	a, err := NewRatioBudget(clusterClient(t), "shared", cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newRatioBudget(clusterClient(t), "shared", cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	for range 7 {
		a.RecordRequest(bg())
	}
	if err := a.Close(bg()); err != nil { // deposits the seven
		t.Fatalf("Close: %v", err)
	}
	leased, _, err := b.s.kind.sync(bg(), b.s.client, b.Key(), 0, 0, 0, 0, 100)
	if err != nil || leased != 7 {
		t.Fatalf("lease on the cluster after 7 deposits at ratio 1: got (%d, %v), want 7", leased, err)
	}

	tb, err := newTokenBucket(clusterClient(t), "bucket", budget.TokenBucketConfig{Capacity: 3, Refill: 1e-9}, opts)
	if err != nil {
		t.Fatal(err)
	}
	leased, _, err = tb.s.kind.sync(bg(), tb.s.client, tb.Key(), 0, 0, 0, 0, 100)
	if err != nil || leased != 3 {
		t.Fatalf("lease of a full bucket of 3 on the cluster: got (%d, %v), want 3", leased, err)
	}
}

// TestBudgetKeysHashTagged pins the key layout: the name is the key's hash
// tag, so that a budget's key has the slot of its name.
func TestBudgetKeysHashTagged(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	b, err := newRatioBudget(c, "payments", budget.RatioConfig{}, BudgetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.Key(), "retryfuse:budget:{payments}"; got != want {
		t.Fatalf("key: got %q, want %q", got, want)
	}
}

// onSingleAndCluster runs f on the shared server and on the shared
// cluster.
func onSingleAndCluster(t *testing.T, f func(*testing.T, redis.UniversalClient)) {
	t.Run("single", func(t *testing.T) { f(t, sharedClient(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, clusterClient(t)) })
}
