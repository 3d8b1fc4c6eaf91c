package idempotency

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/internal/fingerprint"
	"github.com/retryfuse/retryfuse/internal/honour"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is the middleware's settings and its constructor.

// The response header fields the middleware adds, named as a client reads
// them (internal/honour, shared with package retryfuse).
const (
	// HeaderReplayed, "Idempotent-Replayed: true", marks a response
	// replayed from the Ledger: the handler did not run for this request;
	// this is the response to the first request under the key. The name
	// and value are those large payment APIs send.
	HeaderReplayed = honour.HeaderReplayed
	// HeaderHonoured, "Idempotency-Key-Honoured: ?1" (a Structured Field
	// Boolean, RFC 8941), is on every response to a request the middleware
	// handled (one of Config.Methods and Config.Route), its refusals
	// included: the server runs a key's request at most once and replays
	// its response. A client may learn from it that repeating a keyed
	// request to this server is safe. Requests passed through untouched do
	// not carry it.
	HeaderHonoured = honour.HeaderHonoured
)

// Defaults of Config.
const (
	defaultMaxBodyBytes  = 1 << 20
	defaultMaxStoredBody = 64 << 10
	defaultRetryAfter    = time.Second
)

// settleTimeout bounds each Ledger step that settles a key once its
// handler has run (Complete, Uncertain): it runs detached from the
// request's cancellation (the client may have gone; what the handler did
// must still be recorded), but not for ever.
const settleTimeout = 5 * time.Second

// Config configures a Handler. Every zero value means the default given; a
// negative value is invalid.
type Config struct {
	// Ledger keeps each key's state and stored response. Nil means a
	// ledger.Memory of the Handler's own, with its defaults: keys
	// honoured by this process alone, kept for 24h. Servers that answer
	// for the same keys (replicas behind a load balancer) must share a
	// Ledger, such as retryfuseredis.Ledger. A key is kept for the
	// Ledger's TTL (ledger.Memory.TTL, retryfuseredis.LedgerConfig.TTL):
	// publish it (draft Section 2.3). Give the server's keys a Ledger (or a
	// Redis prefix) apart from any client's. A TxLedger (such as
	// retryfusesql's Ledger.Transactional) runs the handler in the
	// transactional mode: see TxLedger.
	Ledger ledger.Ledger
	// Methods are the request methods that need a key, matched exactly
	// (as on the wire). Nil means POST and PATCH, the methods that are not
	// idempotent (RFC 9110, Section 9.2.2). A request of another method
	// is passed to the next handler untouched, with a key or without.
	Methods []string
	// Route, when not nil, narrows the requests that need a key to those
	// of Methods for which it returns true; the others are passed through
	// untouched. Nil means every request of Methods. It must be safe for
	// concurrent use.
	Route func(*http.Request) bool
	// KeyOptional, true, passes a request of Methods and Route that has no
	// key to the next handler as it is (with HeaderHonoured), rather than
	// answer it 400 (ProblemKeyMissing). A malformed key is refused
	// either way.
	KeyOptional bool
	// Scope returns the scope of r's key: keys are one only within a
	// scope, so that two clients who chose the same key never see each
	// other's response. Where several tenants or principals call, scope
	// keys by the authenticated principal (the subject of the verified
	// Authorization credentials, never an unverified header), as the
	// draft advises (Section 5): a principal whose token is refreshed
	// then keeps its keys. Nil means one scope for every request, in
	// which the credentials a request carries (Credentials) tell
	// principals apart: a repeat with other credentials is refused. It
	// must be safe for concurrent use; its result may be any string.
	Scope func(r *http.Request) string
	// Credentials names the credentials a request carries (see
	// retryfuse.Credentials): a repeat under a key is answered with the
	// stored response only when it carries the same credentials as the
	// request that first used the key. One that carries others is refused
	// (422, ProblemKeyReused): the handler does not run for it and
	// nothing stored is sent, whether the first request is in flight,
	// completed or uncertain. A keyed hash of them is bound into the
	// fingerprint; the credentials are never stored. The zero value names
	// the Authorization header field, under a public key, when Scope is
	// nil. With a Scope, which names the principal the application
	// verified, the zero value names nothing, so that a principal whose
	// token was refreshed or key rotated gets its stored response; set
	// Headers or Cookies to bind them as well. Headers set to an empty,
	// non-nil slice, without Cookies, binds nothing (the behaviour before
	// credentials were bound; every caller is then trusted alike).
	Credentials retryfuse.Credentials
	// UnstoredHeaders are response header fields never stored under a key,
	// and so never replayed: Set-Cookie always (a session issued to the
	// first caller is not the ledger's to keep, nor any repeat's to
	// receive), and those listed (a header that carries a secret or a
	// per-caller value). The first response is sent whole.
	UnstoredHeaders []string
	// Fingerprint, when not nil, computes the fingerprint a key is stored
	// with, from the request and its body (read whole, at most
	// MaxBodyBytes), instead of the default: the method, the escaped URL
	// path, the raw query and the body, as retryfuse's Transport computes
	// it (FingerprintOf). Set it to narrow what tells two requests apart
	// where a part of the URL changes from one honest repeat to the next
	// (a presigned URL's signature and date, say): leave out only what
	// never names the operation, for a repeat under the key with a
	// different fingerprint is refused (422), and one with the same is
	// given the first's response. It must be safe for concurrent use.
	Fingerprint func(r *http.Request, body []byte) ledger.Fingerprint
	// MaxBodyBytes bounds the request body read to fingerprint it. Zero
	// means 1 MiB, retryfuse.Transport's MaxFingerprintBytes. A request
	// whose body is longer is answered 413 (ProblemBodyTooLarge) and not
	// run.
	MaxBodyBytes int64
	// MaxStoredBody bounds the response body kept to store under the key.
	// Zero means 64 KiB, the default of retryfuse's ledgers. A response
	// with a longer body is sent whole, but the key is completed without
	// a stored response: a repeat is answered 409 (ProblemNotStored). A
	// Ledger with a lower bound of its own applies it too.
	MaxStoredBody int64
	// RetryAfter is the Retry-After of a 409 for a key in flight and of a
	// 503 for a Ledger that cannot answer, rounded up to whole seconds.
	// Zero means 1s.
	RetryAfter time.Duration
	// RerunUncertain declares the next handler safe to run again for a
	// request whose earlier run ended without a result (it panicked, or
	// its claim expired: ProblemOutcomeUnknown otherwise). Such a key is
	// then released and claimed again, and the handler runs. Set it only
	// for a handler that is idempotent by itself (one that checks the
	// state it changes): a claim expires after the Ledger's InFlightTTL,
	// and the earlier run may still be going on.
	RerunUncertain bool
	// ErrorLog receives the Ledger's failures: a Begin that failed (the
	// request was answered 503) and a step that could not record a
	// handler's outcome (the key then stays in flight until the Ledger's
	// InFlightTTL, and is uncertain afterwards). Nil means the log
	// package's standard logger.
	ErrorLog *log.Logger
}

// Handler is an http.Handler that honours Idempotency-Key for the handler
// it wraps: it runs a key's request at most once and answers a repeat
// with the stored response. See the package documentation. Create it with
// New.
//
// This type is concurrency safe.
type Handler struct {
	next       http.Handler
	ledger     ledger.Ledger
	methods    []string // nil: POST and PATCH
	route      func(*http.Request) bool
	fp         func(*http.Request, []byte) ledger.Fingerprint // nil: FingerprintOf the request's parts
	optional   bool
	scope      func(*http.Request) string
	maxBody    int64
	maxStored  int64
	retryAfter string
	rerun      bool
	log        *log.Logger
	creds      *fingerprint.Credentials // nil: credentials not bound
	unstored   []string                 // canonical names of the header fields not stored
	memory     bool                     // ledger is a *ledger.Memory
	tx         TxLedger                 // ledger, when it is one: the transactional mode (tx.go)
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler that honours Idempotency-Key in front of next. A
// nil next, a negative setting or an empty method gives an error wrapping
// retryfuse.ErrInvalidPolicy that names the field.
func New(next http.Handler, cfg Config) (*Handler, error) {
	switch {
	case next == nil:
		return nil, invalid("next handler", "must not be nil")
	case cfg.MaxBodyBytes < 0:
		return nil, invalid("Config.MaxBodyBytes", "must not be negative")
	case cfg.MaxStoredBody < 0:
		return nil, invalid("Config.MaxStoredBody", "must not be negative")
	case cfg.RetryAfter < 0:
		return nil, invalid("Config.RetryAfter", "must not be negative")
	}
	for _, m := range cfg.Methods {
		if m == "" {
			return nil, invalid("Config.Methods", "must not hold an empty method")
		}
	}
	h := &Handler{
		next:      next,
		ledger:    cfg.Ledger,
		route:     cfg.Route,
		fp:        cfg.Fingerprint,
		optional:  cfg.KeyOptional,
		scope:     cfg.Scope,
		maxBody:   orDefault(cfg.MaxBodyBytes, defaultMaxBodyBytes),
		maxStored: orDefault(cfg.MaxStoredBody, defaultMaxStoredBody),
		rerun:     cfg.RerunUncertain,
		log:       cfg.ErrorLog,
	}
	if err := h.credentials(cfg); err != nil {
		return nil, err
	}
	if cfg.Methods != nil {
		h.methods = append([]string{}, cfg.Methods...)
	}
	if h.ledger == nil {
		h.ledger = &ledger.Memory{}
	}
	_, h.memory = h.ledger.(*ledger.Memory)
	h.tx, _ = h.ledger.(TxLedger)
	ra := orDefault(cfg.RetryAfter, defaultRetryAfter)
	h.retryAfter = strconv.FormatInt(int64((ra+time.Second-1)/time.Second), 10)
	if h.log == nil {
		h.log = log.Default()
	}
	return h, nil
}

func invalid(field, problem string) error {
	return fmt.Errorf("%w: idempotency: %s %s", retryfuse.ErrInvalidPolicy, field, problem)
}

func orDefault[T int64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// handles reports whether r is one the middleware handles: of its methods
// and its route.
func (h *Handler) handles(r *http.Request) bool {
	if h.methods == nil {
		if r.Method != http.MethodPost && r.Method != http.MethodPatch {
			return false
		}
	} else if !slices.Contains(h.methods, r.Method) {
		return false
	}
	return h.route == nil || h.route(r)
}

// settleContext returns the context of a Ledger step that records a
// handler's outcome: ctx's values without its cancellation, bounded by
// settleTimeout. A ledger.Memory never blocks and never looks at
// its context: it is given ctx as it is.
func (h *Handler) settleContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if h.memory {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}
