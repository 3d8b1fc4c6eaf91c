package retryfuse

import (
	"net/http"
	"time"

	"github.com/retryfuse/retryfuse/breaker"
	"github.com/retryfuse/retryfuse/budget"
	"github.com/retryfuse/retryfuse/ledger"
)

// RetryPolicy is when and how a call is repeated: the attempts, the waits
// between them, the brakes on one call, and the retry budget shared by
// calls. The zero value is the default: 3 attempts, full-jitter backoff
// from 100ms to 10s, a Retry-After honoured up to 30s, a ratio budget per
// scope.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts in total, the first included.
	// Zero means 3; 1 disables retries. The decision core also stops a
	// call after MaxFailureStreak failed attempts in a row; a zero
	// MaxFailureStreak follows MaxAttempts, so that it never stops a call
	// sooner. With MaxAttempts 1 the settings that shape retries (the
	// backoff, MaxRetryAfter, MaxDrainBytes, the brakes, the budgets) are
	// accepted and stay idle until retries are turned back on; a
	// HedgePolicy is refused with it (a hedge counts as an attempt).
	MaxAttempts int

	// InitialBackoff and MaxBackoff shape the delay before a retry: the
	// ceiling doubles from InitialBackoff up to MaxBackoff, and the delay is
	// drawn uniformly below it (full jitter). Zero means 100ms and 10s (or
	// InitialBackoff when that is longer). A MaxBackoff below InitialBackoff,
	// its default included, is refused.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration

	// AttemptTimeout bounds each attempt until its response headers arrive
	// (the deadline its context reports); it is cut to what remains of the
	// caller's deadline. The body of a returned response stays readable
	// until it is closed. Zero means no timeout beyond the caller's.
	AttemptTimeout time.Duration

	// MaxRetryAfter caps a server's Retry-After. A retryable response
	// asking for a longer wait, or for a wait longer than the caller's
	// deadline leaves, is returned at once. Zero means 30s.
	MaxRetryAfter time.Duration

	// MaxFailureStreak and MaxCallCost brake one call in the decision core
	// (decide.Policy's FailureThreshold and BudgetUnits): the failed
	// attempts in a row, and the total cost of its attempts, that stop it
	// (ErrFailureStreak, ErrCallCost). They are about one call, not a
	// dependency: the Breaker's FailureThreshold opens a scope for every
	// call. Zero means 5 or MaxAttempts, whichever is larger, and 100.
	//
	// A success ends a call, so the failed attempts in a row are all its
	// attempts so far: MaxFailureStreak caps them as MaxAttempts does, and
	// the lower of the two stops the call. Each brake is a ceiling: one
	// that a call cannot reach before MaxAttempts stops it is accepted,
	// as the defaults are beside 3 attempts.
	MaxFailureStreak int
	MaxCallCost      float64

	// TimeoutCost is the cost of an attempt that timed out; other attempts
	// cost 1. A timeout holds the dependency's resources longer than a fast
	// failure; raise it to brake sooner on timeouts. Zero means 1. A
	// timeout of the Base's own (dial, TLS handshake) counts as well as
	// one of AttemptTimeout. It weighs only the MaxCallCost brake: a
	// TimeoutCost other than 1 is refused when no call can reach
	// MaxCallCost (the default 100 included), as attempts that all time
	// out cost less before MaxAttempts or MaxFailureStreak stops the call,
	// unless a call makes a single attempt.
	TimeoutCost float64

	// Classifier changes how responses and errors are classified. Nil
	// means the default rules (see Classifier). The request-safety rules
	// apply on top.
	Classifier Classifier

	// Budget, when set, is the one retry budget shared by every scope of
	// this Transport (and by every Transport it is given to). Each retry
	// must take a token from it; the first attempt is always free.
	Budget budget.Budget

	// NewBudget creates the budget of a scope on first use, when Budget is
	// nil. It is called once per scope, under the Transport's lock: keep it
	// quick (a constructor), and do not call the Transport from it. Nil
	// means a budget.Ratio with its default settings per scope (retries at
	// most 10% of requests plus a small floor). Return budget.Unlimited() to
	// turn budgets off; a nil Budget with a nil error counts as
	// budget.Unlimited() too. An error fails the call that needed the
	// budget, before anything is sent. Setting both Budget and NewBudget
	// is refused: NewBudget is never called with a Budget.
	NewBudget func(scope string) (budget.Budget, error)

	// MaxDrainBytes bounds how much of a retryable response's body is read
	// when the response is set aside for a retry: read, its connection
	// goes back to the pool during the wait, and the response is kept to
	// hand back should no retry follow. A longer body is closed past that
	// point and its response dropped (its status stays in the error). Zero
	// means 64 KiB. The read is also bounded in time, to one second: a body
	// still arriving then is closed, its connection with it. Other bodies
	// the Transport discards are closed unread.
	MaxDrainBytes int64
}

// KeyPolicy is what the Transport does with idempotency keys: whether it
// makes them, the Ledger that remembers them, whom it asks about an
// uncertain write, and whether the servers it calls honour them. The
// zero value keeps the callers' keys, with no Ledger and no Reconciler,
// and learns which servers honour keys from their answers.
type KeyPolicy struct {
	// Generate, when true, gives a POST or PATCH that lacks an
	// idempotency key a random one (128 bits from crypto/rand), so that it
	// may be repeated. The key is sent on every attempt and reported in
	// hooks and errors (KeyGenerated).
	Generate bool

	// Ledger, when set, remembers idempotency keys (scoped by the Scope),
	// so that a concurrent duplicate is braked (ErrDuplicateInFlight), a
	// key reused with another body is refused (ErrIdempotencyConflict),
	// and a completed key gets its stored result back without sending. A
	// call whose outcome stays uncertain leaves its key neither completed
	// nor free: later calls under it get a *ReconcileRequiredError.
	// Requests without a key, or whose body has no GetBody, bypass the
	// ledger. A *ledger.Memory keeps the keys in this process, on the
	// Transport's clock; the modules redis and sql keep them for a fleet.
	Ledger ledger.Ledger

	// Credentials names the credentials a request carries (see
	// Credentials): a keyed hash of them is bound into the fingerprint
	// the Ledger keeps, so that a call under a key that the Ledger holds
	// for a request that carried other credentials (another principal,
	// such as another merchant of a platform sharing one Ledger; or the
	// same one whose token was refreshed since) is refused with a
	// *KeyConflictError before anything is sent: never answered with the
	// other's stored response, never told that its write was done, and
	// never sent again toward a server that may not honour keys. The
	// zero value names the Authorization header field. It is refused
	// without a Ledger: only the Ledger keeps fingerprints.
	Credentials Credentials

	// MaxFingerprintBytes bounds the body hashed for the Ledger; a longer
	// body is refused with ErrFingerprintLimit. Zero means 1 MiB. It is
	// refused without a Ledger: nothing else hashes bodies.
	MaxFingerprintBytes int64

	// MaxStoredBody bounds the response body recorded for the Ledger as
	// the result of a completed key. A longer body is returned to the
	// caller whole, but not stored: a later call under the key gets an
	// error matching ErrAlreadyApplied rather than a replay. Zero means 64
	// KiB. The headers stored are bounded too, to 100 values and 32 KiB: a
	// response with more is not stored either. It is refused without a
	// Ledger: nothing else stores results.
	MaxStoredBody int64

	// Reconciler, when set, is asked whether an uncertain write took
	// effect before a *ReconcileRequiredError is returned. See Reconciler.
	Reconciler Reconciler

	// ServerHonours declares that the servers this Transport calls honour
	// Idempotency-Key (as package idempotency's middleware does): each
	// runs a key's request at most once, answers a repeat with the stored
	// result, and a repeat while the first still runs with 409. A keyed
	// write whose outcome is uncertain is then sent again, with the same
	// key and body, instead of returning a *ReconcileRequiredError: the
	// server answers with the stored result, or runs it once (decision
	// contract version 2). Its body must be replayable (GetBody). Repeats
	// that end without a response settling the write (the attempts, the
	// budget or the deadline ran out on timeouts, resets or 503s) still
	// end in a *ReconcileRequiredError.
	//
	// The declaration is trusted for a scope once one of its responses to
	// a keyed request has carried the marker of such a server
	// ("Idempotency-Key-Honoured: ?1"), until a response to a keyed write
	// comes without it (but a 5xx, 408 or 429): a server that never says
	// so is never sent a write twice (Hooks.Policy, "server_keys"). False
	// means a scope is known to honour keys only as learnt (HonourMemory).
	ServerHonours bool

	// HonourMemory is how long a scope is taken to honour Idempotency-Key
	// after a response to a keyed request carrying the marker of such a
	// server, from the latest such response, unless revoked (see
	// ServerHonours). Zero means 10 minutes; negative, never: only
	// ServerHonours declares it. Such a server's answers to a keyed
	// request are mapped to what they mean (see the README).
	HonourMemory time.Duration
}

// BrakePolicy is the circuit breaker a Transport's calls pass. The zero
// value brakes nothing.
type BrakePolicy struct {
	// Breaker, when set, brakes a failing dependency per scope: an open
	// scope fails fast with a *breaker.OpenError without sending, and after
	// its open interval only a bounded number of probes pass. Only
	// dependency outcomes feed it: the caller's cancellation, a budget
	// refusal or a local refusal are not evidence about the dependency. A
	// Breaker may be shared by several Transports.
	Breaker *breaker.Breaker

	// Route, when set, divides the Breaker's scopes by a function of the
	// request (a route's template, an operation), so that one failing
	// route does not block the others of its dependency: the scope at the
	// breaker is the Scope's, a space and the value ("https://api:443 GET
	// /orders/{id}"), or the Scope's alone for an empty value or a panic.
	// Budgets, limits and the Ledger stay per Scope. Nil means the
	// Scope's. Set without a Breaker, it brakes with a Breaker of the
	// default breaker.Settings, the Transport's own. Keep the values few:
	// each is a scope the Breaker remembers, within its MaxScopes.
	Route func(*http.Request) string
}

// HedgePolicy sends a second attempt beside one that is slow to answer,
// for tail latency. The zero value hedges nothing.
type HedgePolicy struct {
	// Max, when above zero, hedges requests: when an attempt has not
	// answered after the hedge delay, another is sent beside it, up to
	// Max more per attempt, and the first good answer wins; the others are
	// cancelled and their bodies closed. Each hedge counts as an attempt
	// (against RetryPolicy.MaxAttempts) and takes a retry from the budget;
	// it passes the breaker, the rate limiter and the bulkhead without
	// waiting, and is not sent when any of them refuses. A retry may hedge
	// again. Only requests of Methods that may be repeated at all (see
	// Transport) are hedged. Zero means 1 when another field of the
	// HedgePolicy is set, and no hedging when none is.
	//
	// Max with MaxAttempts 1 is refused: the hedge would be a second
	// attempt. A Max of MaxAttempts or more is a ceiling: hedges go while
	// attempts remain, and the next is refused (reported through
	// Hooks.Policy). As a hedge waits for nothing, it needs a free
	// bulkhead slot and a rate limiter token beside its attempt's: it is
	// refused beside a LoadPolicy.MaxInFlight of 1, and beside a RateBurst
	// of 1 that the RateLimit does not refill within the hedge delay no
	// hedge is sent.
	Max int

	// Delay is how long an attempt runs before a hedge is sent beside it.
	// With Quantile set, it is the delay until the scope has a latency
	// estimate (zero: no hedge until then), and the longest delay after: a
	// few slow answers never make hedging later than this. Zero, with
	// Quantile zero too, means the estimate of the default quantile (0.95
	// of recent answers). It is refused at or above
	// RetryPolicy.AttemptTimeout (every attempt would time out before its
	// hedge is due).
	Delay time.Duration

	// Quantile, when set (above 0, below 1), derives the hedge delay from
	// the scope's observed latency: the delay is this quantile of the time
	// to response headers of the scope's recent answers (0.95: hedge the
	// slowest 5%), kept in a small histogram per scope (quarter-octave
	// buckets, recent answers weighing most). A branch cancelled because
	// another answered first is not an answer, and is not counted. The
	// estimate needs 20 answers; Delay applies before that.
	Quantile float64

	// Methods are the methods that may be hedged. Nil means GET, HEAD and
	// OPTIONS. Listing another method is a risk taken knowingly: the same
	// request is then sent twice at once, so the server sees two
	// concurrent copies (a PUT or DELETE applied twice, a keyed POST whose
	// second copy finds the first still in progress). A POST or PATCH is
	// hedged only when it may be repeated at all: with an idempotency key
	// and a replayable body. The slice is copied at the first use. An
	// empty, non-nil slice hedges no method.
	Methods []string
}

// ReadPolicy lets concurrent identical reads share one call. The zero
// value shares nothing.
type ReadPolicy struct {
	// Share, when true, lets concurrent identical reads (a GET or HEAD
	// without a body, of one ShareKey) share one call, its retries and
	// hedges included. Each caller gets its own copy of the status,
	// headers and body (buffered up to MaxSharedBody) and its own
	// Fallback's answer; a caller whose context ends leaves the others be,
	// and the call is cancelled once every caller has gone. It runs on a
	// goroutine of its own, under the context values of the caller who
	// started it, and plans against the latest deadline of its callers
	// (none once one had none). Hooks.Policy says who led and followed.
	Share bool

	// ShareKey names the answer a read asks for: reads of one method with
	// one key share a call. It must tell apart every request whose answer
	// may differ, credentials above all. Nil means the method, the URL,
	// the Host and every header but those that only trace a request
	// (Traceparent, X-Request-Id, ...: see the README): reads whose
	// Authorization, Cookie, Accept or any other header differs never
	// share. A Base that adds credentials from the context needs a
	// ShareKey that includes them. A ShareKey that returns "" or panics
	// (reported) leaves the read unshared. Set alone, it shares reads as
	// Share does.
	ShareKey func(*http.Request) string

	// MaxSharedBody bounds the body buffered to be shared: past it, the
	// caller who started the call reads the body as it comes, and every
	// other makes a call of its own. Zero means 1 MiB. Set alone, it
	// shares reads as Share does.
	MaxSharedBody int64
}

// ScopePolicy names the dependency a request belongs to, and bounds the
// scopes whose state a Transport keeps. The zero value scopes by scheme,
// host and port, up to 1024 scopes.
type ScopePolicy struct {
	// Of names the scope of a request, for budgets, limits, the throttle,
	// the breaker (unless BrakePolicy.Route divides it) and the ledger. Nil
	// means the request's scheme, host and port, the port written even
	// when it is the scheme's default ("https://api.example.com:443").
	Of func(*http.Request) string

	// Max bounds the scopes whose state the Transport keeps: each scope's
	// budget (unless RetryPolicy.Budget is shared), rate limiter, bulkhead
	// (its learnt limit, its slow start), throttle and latency estimate,
	// in one record per scope (the breaker has its own bound,
	// breaker.Settings.MaxScopes). When it is reached, the record of a
	// scope with no attempt in flight is dropped to make room (one with
	// nothing to forget first: no token owed to its rate limiter, no
	// rejection in its throttle), and that scope starts afresh when it
	// returns. A scope with attempts in flight or queued is never dropped,
	// so while every scope is busy the records may exceed the bound by as
	// many scopes. Zero means 1024. It is refused when nothing is kept per
	// scope: with a shared Budget, without the throttle or the pace, a
	// bulkhead, a rate limit, hedges or a Breaker, and with a negative
	// HonourMemory.
	Max int
}
