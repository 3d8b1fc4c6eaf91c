package retryfuseredis_test

import (
	"context"
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/budget"
	retryfuseredis "github.com/retryfuse/retryfuse/redis"
)

// Every replica of a service builds its client this way: one retry budget
// per dependency and one key ledger, both shared through Redis.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()

	budgets, err := retryfuseredis.RatioBudgets(rdb, budget.RatioConfig{}, retryfuseredis.BudgetOptions{})
	if err != nil {
		log.Fatal(err)
	}
	// On the way out, deposit what is not yet in Redis and stop the syncs.
	defer budgets.Close(context.Background())
	ledger, err := retryfuseredis.NewLedger(rdb, retryfuseredis.LedgerConfig{})
	if err != nil {
		log.Fatal(err) // also when Redis keeps no append-only file: see LedgerConfig.AllowWithoutPersistence
	}
	defer ledger.Close(context.Background()) // flushes what Redis could not take yet
	client := &http.Client{Transport: &retryfuse.Transport{
		Retry: retryfuse.RetryPolicy{
			NewBudget: budgets.New,
		},
		Keys: retryfuse.KeyPolicy{
			Ledger: ledger,
		},
		Hooks: retryfuse.Hooks{
			EvidenceUnavailable: func(i retryfuse.EvidenceUnavailableInfo) {
				log.Printf("%s unavailable, fail-safe applied: %v", i.Source, i.Err)
			},
		},
	}}
	_ = client
}
