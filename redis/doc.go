// Package retryfuseredis keeps retryfuse's retry budgets and idempotency
// key ledger in Redis, so that every replica of a service shares them.
//
// A budget held in each process bounds the retries of that process only: a
// fleet of fifty replicas, each with a local budget, may send fifty times
// the retries one budget allows. RatioBudget and TokenBucket keep one
// budget per dependency in Redis instead, with the semantics of
// retryfuse.RatioBudget and retryfuse.TokenBucket. Ledger keeps the keys of
// retryfuse.Ledger in Redis, so that a duplicate request arriving at
// another replica is braked, or answered with the stored result, rather
// than sent again.
//
//	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//	newBudget, _ := retryfuseredis.RatioBudgets(rdb, retryfuse.RatioBudgetConfig{}, retryfuseredis.BudgetOptions{})
//	ledger, _ := retryfuseredis.NewLedger(rdb, retryfuseredis.LedgerConfig{})
//	defer ledger.Close(ctx)
//	client := &http.Client{Transport: &retryfuse.Transport{NewBudget: newBudget, Ledger: ledger}}
//
// Every check is one round trip: one Lua script, run atomically by Redis,
// that reads the server's clock (TIME), updates the key and refreshes its
// expiry (SET PX, PEXPIRE), so that idle keys disappear by themselves.
//
// # When Redis cannot answer
//
// Every Redis call is bounded by a timeout (50ms unless configured), and
// never outlives the caller's context. When the call fails, the evidence is
// unavailable, and it is declared, never hidden:
//
//   - A budget's AllowRetry returns a non-nil error wrapping ErrUnavailable
//     together with its fail-safe answer (FailSafe): by default the answer
//     of a local in-memory budget with the same settings, else refuse or
//     allow. The transport reports it through Hooks.EvidenceUnavailable.
//   - The ledger's Begin returns an error wrapping ErrUnavailable: the
//     transport does not treat the key as free, and refuses the request
//     with retryfuse.ErrLedgerUnavailable. A step that ends a claim is
//     retried in the background until Redis takes it (Ledger.Close
//     flushes them), and a claim never ended is uncertain, never free.
//   - When Redis comes back without the ledger's records, the ledger
//     notices and refuses keyed requests for a quarantine (ErrDataLost).
//     NewLedger refuses a Redis that keeps no append-only file unless
//     told otherwise (LedgerConfig.AllowWithoutPersistence).
//
// Apart from that quarantine, no failure is remembered: the next call
// tries Redis again, so the shared budget and ledger are back as soon as
// Redis is.
package retryfuseredis
