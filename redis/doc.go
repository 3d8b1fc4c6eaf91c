// Package retryfuseredis keeps retryfuse's retry budgets and idempotency
// key ledger in Redis, so that every replica of a service shares them.
//
// A budget held in each process bounds the retries of that process only: a
// fleet of fifty replicas, each with a local budget, may send fifty times
// the retries one budget allows. RatioBudget and TokenBucket keep one
// budget per dependency in Redis instead, with the semantics of
// budget.Ratio and budget.TokenBucket. Ledger keeps the keys of
// ledger.Ledger in Redis, so that a duplicate request arriving at
// another replica is braked, or answered with the stored result, rather
// than sent again.
//
//	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//	budgets, _ := retryfuseredis.RatioBudgets(rdb, budget.RatioConfig{}, retryfuseredis.BudgetOptions{})
//	defer budgets.Close(ctx)
//	ledger, _ := retryfuseredis.NewLedger(rdb, retryfuseredis.LedgerConfig{})
//	defer ledger.Close(ctx)
//	client := &http.Client{Transport: &retryfuse.Transport{
//		Retry: retryfuse.RetryPolicy{NewBudget: budgets.New},
//		Keys:  retryfuse.KeyPolicy{Ledger: ledger},
//	}}
//
// The budgets answer every call from local state: a goroutine per budget
// deposits the requests and leases retries from Redis in batches, with one
// script call per SyncInterval (see RatioBudget for the fleet's bound).
// Each ledger call is one round trip. Every script runs atomically in
// Redis, reads the server's clock (TIME), updates its one key and
// refreshes its expiry (SET PX, PEXPIRE), so that idle keys disappear by
// themselves; budget keys are hash-tagged, for Redis Cluster.
//
// The Ledger is a ledger.Inspector and a ledger.Settler, for operators:
// Lookup reads a key's record (a read-only script), List pages through
// the ledger's keys with SCAN (COUNT and a cursor, never KEYS), Settle
// records a stuck key's outcome with a script that first checks the
// record is as the operator saw it. The command
// "retryfuse keys --redis ADDR" drives them.
//
// # When Redis cannot answer
//
// Every Redis call is bounded by a timeout (50ms unless configured), and
// never outlives the caller's context. When the call fails, the evidence is
// unavailable, and it is declared, never hidden:
//
//   - A budget answers from its fail-safe (FailSafe: by default a local
//     in-memory budget with the same settings, else refuse or allow) from
//     its first failed sync until Redis answers again, and never waits on
//     Redis. Its first AllowRetry after the failure returns an error
//     wrapping ErrUnavailable, its first after the recovery one wrapping
//     ErrRecovered; the transport reports each through
//     Hooks.EvidenceUnavailable, once.
//   - The ledger's Begin returns an error wrapping ErrUnavailable: the
//     transport does not treat the key as free, and refuses the request
//     with retryfuse.ErrLedgerUnavailable. A step that ends a claim is
//     retried in the background until Redis takes it (Ledger.Close
//     flushes them), and a claim never ended is uncertain, never free.
//   - An error of a call that got no answer while the client's dials were
//     failing carries the last dial's error (connection refused, no such
//     host), which go-redis would otherwise only log: the budgets and the
//     ledger give each client one dial hook that keeps it.
//   - When Redis comes back without the ledger's records, the ledger
//     notices and refuses keyed requests for a quarantine (ErrDataLost).
//     NewLedger refuses a Redis that keeps no append-only file unless
//     told otherwise (LedgerConfig.AllowWithoutPersistence).
//
// A ledger call given a context that had already ended sends nothing and
// returns an error wrapping ErrContextEnded, not ErrUnavailable: Redis is
// not to blame. A step that ends a claim is then sent from the background
// at once, with a context of its own.
// A budget's Close given such a context, with something left to send,
// sends nothing either, with the same error.
//
// Apart from that quarantine, the ledger remembers no failure: the next
// call tries Redis again. A budget probes Redis with backoff. So the shared
// budget and ledger are back as soon as Redis is.
package retryfuseredis
