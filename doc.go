// Package retryfuse makes HTTP retries safe. Its Transport is a drop-in
// http.RoundTripper that repeats a request only when repeating it is known
// to be safe, refuses to replay a write whose outcome is uncertain, and
// keeps retry load bounded across every caller of a dependency.
//
//	client := &http.Client{Transport: &retryfuse.Transport{}}
//	resp, err := client.Do(req)
//	var rec *retryfuse.ReconcileRequiredError
//	if errors.As(err, &rec) {
//		// The write may have been applied: look it up by rec.IdempotencyKey.
//	}
//
// The Transport's settings are grouped by policy, each group a value type
// whose zero value is its defaults: Retry (RetryPolicy), Keys (KeyPolicy),
// Brake (BrakePolicy), Hedge (HedgePolicy), Load (LoadPolicy), Reads
// (ReadPolicy) and Scope (ScopePolicy). The retry budgets are in package
// github.com/retryfuse/retryfuse/budget, the circuit breaker in package
// github.com/retryfuse/retryfuse/breaker, the key ledger (shared with the
// server half, package idempotency) in package
// github.com/retryfuse/retryfuse/ledger:
//
//	br, err := breaker.New(breaker.Settings{})
//	if err != nil {
//		return err
//	}
//	tr := &retryfuse.Transport{
//		Retry: retryfuse.RetryPolicy{MaxAttempts: 5, AttemptTimeout: 2 * time.Second},
//		Brake: retryfuse.BrakePolicy{Breaker: br},
//	}
//
// # The names, by what you look for
//
//   - A client: Transport (its zero value is ready), Transport.Validate.
//   - Its settings, one group per policy: RetryPolicy (attempts, backoff,
//     Retry-After, budgets; Classifier and Class), KeyPolicy (keys, the
//     ledger, Credentials, Reconciler), BrakePolicy (the breaker), HedgePolicy,
//     LoadPolicy and ThrottlePolicy (the load controls), ReadPolicy (shared
//     reads) and ScopePolicy (what one dependency is).
//   - A request's keys and needs: WithIdempotencyKey, IdempotencyKeyOf,
//     WithCurrentData.
//   - What went wrong: ReconcileRequiredError (its Resolve and Repeat,
//     and Reconciling for the lookups that settle it),
//     KeyConflictError, RetryError, StatusError, BulkheadFullError, RateLimitError, the
//     sentinels (ErrDeclined, ErrReconcileRequired, ErrBudgetExhausted, …),
//     MayRetry for a retry layer above, and ReasonName.
//   - What it decided: Hooks and JoinHooks, each hook's Info type
//     (AttemptStartInfo, AttemptDoneInfo, DecisionInfo, RetryInfo,
//     ReconcileInfo, GiveUpInfo, EvidenceUnavailableInfo, PolicyInfo, all
//     holding a CallInfo).
//   - How each scope stands: Transport.Snapshot and ScopeState
//     (BulkheadState, RateLimitState, ThrottleState, PaceState), shown live by
//     package debugpage.
//   - Whose keys they are: Credentials, the credentials bound into a
//     key's fingerprint on both halves (KeyPolicy.Credentials, and
//     idempotency.Config.Credentials on the server).
//
// Related packages: budget, breaker, ledger (and ledger/ledgertest, the
// conformance suite a ledger of one's own store runs), idempotency (the
// server half), sloghooks, debugpage (the live page), retryfusetest (the
// test kit) and decide (the decision core); the command
// cmd/retryfuse (decide, demo, and keys, which reads and settles a shared
// ledger's keys).
//
// The guides in the repository's docs/ folder take one concern each:
// reconcile.md, retries-and-deadlines.md, budgets-and-breaker.md,
// load.md, hedging-and-reads.md, ledgers.md, server.md, observability.md,
// operating.md (stuck keys during an incident), testing.md and errors.md.
//
// # What is repeated
//
// Every attempt is classified (see Classifier): the statuses 408, 425,
// 429, 500, 502, 503 and 504 and transient transport errors (refused,
// reset, EOF, timeouts) are worth another attempt; everything else is
// handed back as it is. Whether the request may be sent again is then
// decided by the decision core, decide.Decide in package
// github.com/retryfuse/retryfuse/decide, which implements a small,
// versioned contract that the command `retryfuse decide` also exposes as
// JSON:
//
//   - GET, HEAD, OPTIONS, TRACE, PUT and DELETE may be repeated.
//   - POST, PATCH and every other method may be repeated only when the
//     request carries an Idempotency-Key (or X-Idempotency-Key) header and
//     a replayable body (none, or Request.GetBody set, as http.NewRequest
//     sets for in-memory bodies). Bodies are replayed through GetBody, byte
//     for byte, with the same key.
//   - A write whose outcome is uncertain — a timeout, reset or the
//     caller's cancellation after the request may have been written — is
//     never replayed, even with a key: RoundTrip returns a
//     *ReconcileRequiredError.
//
// How far an attempt got is traced with net/http/httptrace: no connection
// obtained means nothing was written (decide.PhasePreWrite); otherwise the
// request may have been written (decide.PhasePostWrite). A base that gives
// no trace yields decide.PhaseUnknown, treated as written. Hooks report
// phases, outcomes, verdicts and key states with the decide package's
// types (decide.Phase, decide.Outcome, decide.Verdict, decide.KeyState),
// and ReconcileRequiredError.Phase is a decide.Phase.
//
// # Waiting
//
// Between attempts the transport waits a capped exponential backoff with
// full jitter, never shorter than a server's Retry-After (both forms),
// never longer than Retry.MaxRetryAfter, and never past the caller's
// deadline: a wait that cannot end in time is not started, and the last
// response is returned instead.
//
// # Errors
//
// A response — even a final 503 — comes back as a response with a nil
// error. An error comes back only when there is no response to give:
//
//	switch {
//	case errors.As(err, &rec): // reconcile: the effect may have happened
//	case errors.Is(err, breaker.ErrOpen): // not sent (again): the breaker is open
//	case errors.Is(err, retryfuse.ErrBudgetExhausted): // the dependency is failing for many callers
//	case errors.Is(err, retryfuse.ErrAttemptsExhausted): // this call ran out of attempts
//	case errors.Is(err, retryfuse.ErrNotRepeatable): // it failed and may not be sent again
//	case errors.Is(err, retryfuse.ErrFailureStreak),
//		errors.Is(err, retryfuse.ErrCallCost): // the decision core braked the call
//	case errors.Is(err, retryfuse.ErrDeadline): // no time left for another wait or attempt
//	case errors.Is(err, retryfuse.ErrDuplicateInFlight): // another call holds the key: wait for it
//	case errors.Is(err, retryfuse.ErrIdempotencyConflict): // the key was used for another request or credentials (*KeyConflictError)
//	case errors.Is(err, retryfuse.ErrLedgerUnavailable): // the ledger could not answer; nothing was sent
//	case errors.Is(err, retryfuse.ErrInvalidIdempotencyKey),
//		errors.Is(err, retryfuse.ErrInvalidPolicy): // bad input or settings; nothing was sent
//	}
//
// Test for the reconcile error first: when the caller's own deadline or
// cancellation strikes after a write, both errors.As(err, &rec) and
// errors.Is(err, context.DeadlineExceeded) (or context.Canceled) hold.
// Set the end-to-end deadline on the request's context rather than with
// http.Client.Timeout: http.Client runs a timer of its own for that
// deadline, and when its timer goroutine runs before RoundTrip returns
// (a race the Transport cannot win: both see the same instant), it
// replaces the transport's error with a text-only one, in which a
// *ReconcileRequiredError can no longer be found. The key is held either
// way: the next call under it is still refused, with the reconcile error.
//
// Each sentinel survives the *url.Error wrapping of http.Client, and the
// error of the last attempt stays reachable through errors.Is and
// errors.As. A call that ended on a timeout reports Timeout() == true, so
// that url.Error.Timeout and os.IsTimeout see it.
//
// Until the caller says what it learnt about an uncertain write, the
// transport holds its key (in the Ledger, or without one in a bounded
// memory of its own) and tells later calls under it to reconcile rather
// than send: ReconcileRequiredError.Resolve records whether it was
// applied.
//
// # One retry owner
//
// Go's http.Transport re-sends by itself, inside one RoundTrip, a request
// it judges replayable after a failure on a reused connection — any method
// carrying an Idempotency-Key header. To stay the only layer that repeats a
// write, the transport sends the key of a non-idempotent request under a
// lower-case header map key, which reaches the server unchanged (header
// names are case-insensitive) but which net/http does not recognise. A
// RoundTripper below the transport should read the key with
// IdempotencyKeyOf rather than Header.Get. A retryfuse Transport beneath
// another one (or called again beneath one through the request context)
// passes each attempt through and only reports it: the outermost repeats.
// A retry layer above the transport (an SDK's, a loop of the caller's)
// should retry only when MayRetry says so, and a logical operation's key
// fixed with WithIdempotencyKey survives its retries.
//
// # Budgets, the breaker and the key ledger
//
// Every retry (never a first attempt) must take a token from a budget
// (budget.Budget) shared by all callers of a dependency: by default one
// budget.Ratio per scope (scheme, host and port), which bounds retries to
// 10% of recent requests plus a small reserve, so that a hundred callers of
// a dead dependency send at most about 120 requests, not 300. A refusal
// hands back the last response, or an error wrapping ErrBudgetExhausted.
//
// A breaker.Breaker, when set as Brake.Breaker, fails calls to an open
// scope fast (*breaker.OpenError) and lets a bounded number of probes
// through after its open interval; only dependency outcomes feed it.
//
// A ledger.Ledger (a ledger.Memory, or a store a fleet shares), when set
// as Keys.Ledger, remembers idempotency keys: a concurrent duplicate is
// braked (ErrDuplicateInFlight), a key reused with another body, or by a
// request carrying other credentials (Keys.Credentials: Authorization by
// default), is refused (*KeyConflictError, matching
// ErrIdempotencyConflict), a completed key gets its stored result back
// without sending, and a key whose write is uncertain stays held. A
// Reconciler, when set as Keys.Reconciler, is asked whether an uncertain
// write took effect before the *ReconcileRequiredError is returned.
//
// The load controls of LoadPolicy (a bulkhead, fixed or learnt, a rate
// limiter, slow start, the throttle of new calls and the pace learnt from
// 429s) are each off until its own setting turns it on: the zero
// Transport refuses nothing before sending and delays nothing but a
// retry, and of the limits on load only the retry budget is on.
//
// # Hooks
//
// Hooks is a struct of optional funcs called synchronously, never under a
// lock, with an Info value carrying the call ID, attempt, method, URL
// without credentials, idempotency key, phase, elapsed time and the
// request's context (BreakerChange, about a scope rather than one call,
// carries the scope, its old and new states and the breaker's settings
// instead). A panicking hook never breaks the call; the first panic of a
// hook or the Classifier is reported once per Transport through
// Hooks.Policy (policy "hook", action "panicked"). Package
// github.com/retryfuse/retryfuse/sloghooks logs every event to a log/slog
// logger with stable attribute names (sloghooks.New); the module
// github.com/retryfuse/retryfuse/otel records OpenTelemetry metrics and
// span events, and traces calls. JoinHooks combines several.
//
// Transport.Snapshot reads each scope's controls as they stand (the
// breaker, the budget, the attempts in flight against their limit, the
// throttle and the pace, each shown when its own setting is on); package github.com/retryfuse/retryfuse/debugpage
// shows them, with the last give-ups and reconcile errors, on a page a
// service mounts (under /debug/retryfuse, say), as HTML and JSON.
//
// # Composing with other transports
//
// A RoundTripper outside retryfuse sees each call once; one inside (its
// Base) sees every attempt:
//
//   - a tracing transport such as otelhttp.NewTransport: inside (the
//     Base), wrapped in retryfuseotel.NewTransport, for a CLIENT span per
//     request sent under a call span by the HTTP semantic conventions
//     (recommended); outside alone for one span per call;
//   - an auth transport (oauth2.Transport, a request signer): inside, so
//     that each attempt carries a fresh token or signature — and a token
//     refresh failure is an error of the attempt, not a retry of it (the
//     credentials it adds are then not bound to a Ledger's keys: see
//     Credentials);
//   - a logging transport: inside to log every attempt, outside to log
//     calls.
//
// Inside, a wrapper that passes the request's context on is traced like
// net/http's Transport; one that does not gives no phase, so a failed
// write behind it counts as possibly written. Read the idempotency key
// there with IdempotencyKeyOf, not Header.Get.
//
// # Testing
//
// Package github.com/retryfuse/retryfuse/retryfusetest scripts the
// failures this Transport exists for (a response lost after the write, a
// reset, a stall, a Retry-After, a cut body) under it as its Base, and
// counts the effects a handler applied per idempotency key. Its in-memory
// Transport runs inside a testing/synctest bubble, where the waits take
// no wall time.
package retryfuse
