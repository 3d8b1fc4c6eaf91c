package retryfuseredis

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// checkPersistence asks every server the client reaches (every master of
// a cluster, every shard of a ring) whether it keeps an append-only file.
// A server that refuses CONFIG (a managed Redis, an ACL without it) is
// taken at its word; one that keeps none gives an error wrapping
// retryfuse.ErrInvalidPolicy; one that cannot be reached, an error
// wrapping ErrUnavailable.
func checkPersistence(ctx context.Context, c redis.UniversalClient) error {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, checkServerPersistence)
	case *redis.Ring:
		return c.ForEachShard(ctx, checkServerPersistence)
	case *redis.Client:
		return checkServerPersistence(ctx, c)
	}
	return checkConfig(ctx, c, "the server")
}

func checkServerPersistence(ctx context.Context, c *redis.Client) error {
	return checkConfig(ctx, c, c.Options().Addr)
}

func checkConfig(ctx context.Context, c redis.Cmdable, addr string) error {
	aof, err := c.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		var refused redis.Error
		if errors.As(err, &refused) {
			return nil // CONFIG not permitted: nothing to check
		}
		return fmt.Errorf("%w: CONFIG GET appendonly on %s: %w", ErrUnavailable, addr, err)
	}
	if aof["appendonly"] == "yes" {
		return nil
	}
	save, _ := c.ConfigGet(ctx, "save").Result()
	return invalid("LedgerConfig.AllowWithoutPersistence",
		fmt.Sprintf("is false, and Redis at %s keeps no append-only file (appendonly %q, save %q): "+
			"a restart would lose the ledger's records since the last snapshot, or all of them; "+
			"run it with appendonly yes (appendfsync always to lose none), or set AllowWithoutPersistence",
			addr, aof["appendonly"], save["save"]))
}
