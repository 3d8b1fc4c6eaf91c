package retryfuseredis

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
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
	b, err := NewTokenBucket(c, "smoke", retryfuse.TokenBucketConfig{Capacity: 2, Refill: 1e-9}, BudgetOptions{Prefix: uniq(t), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false} {
		ok, err := b.AllowRetry(ctx)
		if err != nil {
			t.Fatalf("retry %d: %v", i, err)
		}
		if ok != want {
			t.Fatalf("retry %d: ok = %v, want %v", i, ok, want)
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
		if _, err := NewRatioBudget(c, "n", retryfuse.RatioBudgetConfig{}, BudgetOptions{}); !errors.Is(err, retryfuse.ErrInvalidPolicy) {
			t.Errorf("NewRatioBudget, %s: got %v, want an error wrapping ErrInvalidPolicy", name, err)
		}
		if _, err := NewTokenBucket(c, "n", retryfuse.TokenBucketConfig{}, BudgetOptions{}); !errors.Is(err, retryfuse.ErrInvalidPolicy) {
			t.Errorf("NewTokenBucket, %s: got %v, want an error wrapping ErrInvalidPolicy", name, err)
		}
		if _, err := NewLedger(c, LedgerConfig{}); !errors.Is(err, retryfuse.ErrInvalidPolicy) {
			t.Errorf("NewLedger, %s: got %v, want an error wrapping ErrInvalidPolicy", name, err)
		}
	}
}
