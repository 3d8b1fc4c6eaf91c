package retryfuseredis

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
)

// checkPersistence asks every server the client reaches (every master of
// a cluster, every shard of a ring) whether it keeps an append-only file.
// A server that refuses CONFIG (a managed Redis, an ACL without it) is
// taken at its word; one that keeps none gives an error wrapping
// retryfuse.ErrInvalidPolicy; one that cannot be reached, an error
// wrapping ErrUnavailable.
func checkPersistence(ctx context.Context, client redis.UniversalClient) error {
	checkServer := func(ctx context.Context, c *redis.Client) error {
		return checkConfig(ctx, client, c, c.Options().Addr)
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, checkServer)
	case *redis.Ring:
		err = c.ForEachShard(ctx, checkServer)
	case *redis.Client:
		return checkServer(ctx, c)
	default:
		return checkConfig(ctx, client, client, "the server")
	}
	if err != nil && !errors.Is(err, ErrUnavailable) && !errors.Is(err, retryfuse.ErrInvalidPolicy) {
		// The cluster's own failure to list its masters.
		return unavailable(client, "list the servers", err)
	}
	return err
}

// checkConfig asks c, a server of client, for its append-only setting.
func checkConfig(ctx context.Context, client redis.UniversalClient, c redis.Cmdable, addr string) error {
	aof, err := c.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		var refused redis.Error
		if errors.As(err, &refused) {
			return nil // CONFIG not permitted: nothing to check
		}
		return unavailable(client, "CONFIG GET appendonly on "+addr, err)
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
