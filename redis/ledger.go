package retryfuseredis

import (
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/decide"
)

//go:embed lua/ledger_begin.lua
var ledgerBeginSource string

//go:embed lua/ledger_end.lua
var ledgerEndSource string

var (
	ledgerBeginScript = redis.NewScript(ledgerBeginSource)
	ledgerEndScript   = redis.NewScript(ledgerEndSource)
)

// Defaults of LedgerConfig, those of retryfuse.MemoryLedgerConfig.
const (
	DefaultLedgerPrefix        = "retryfuse:ledger:"
	defaultLedgerTTL           = 24 * time.Hour
	defaultLedgerInFlightTTL   = 5 * time.Minute
	defaultLedgerMaxStoredBody = 64 << 10
)

// LedgerConfig configures a Ledger. Every zero value means the default
// given; a negative value is invalid.
type LedgerConfig struct {
	// Prefix is put before each idempotency key to make its Redis key.
	// Empty means DefaultLedgerPrefix.
	Prefix string
	// TTL is how long a completed or uncertain key is kept, from Complete
	// or Uncertain. Zero means 24h. Afterwards the key is free again.
	TTL time.Duration
	// InFlightTTL is how long an owner may hold a key, from Begin. Zero
	// means 5m. An owner that has not ended its claim by then loses it: the
	// key is free again and the owner's token is stale. Set it above the
	// longest a call (all its attempts and waits) may take.
	InFlightTTL time.Duration
	// MaxStoredBody bounds the bytes of body stored per completed key. Zero
	// means 64 KiB. A longer body completes the key without a stored
	// result: a later call under the key is not replayed, and the
	// transport asks the caller to reconcile. Headers are stored as they
	// came (bounded by the base transport's MaxResponseHeaderBytes), in a
	// compact binary encoding.
	MaxStoredBody int
	// Timeout bounds each Redis call; the caller's context deadline, when
	// sooner, bounds it too. Zero means DefaultTimeout (50ms).
	Timeout time.Duration
}

// Ledger is a retryfuse.Ledger kept in Redis, shared by every process that
// uses the same Redis and Prefix: a duplicate sent by another replica
// while the key is in flight is braked (retryfuse.ErrDuplicateInFlight),
// and once the key is completed it gets the stored result.
//
// Each call is one round trip: one script (EVALSHA), so that looking a key
// up and claiming it (Begin), and checking the owner's token and ending the
// claim (Complete, Release, Uncertain), are each atomic. Owner tokens are
// 128 random bits (crypto/rand). Every record carries an expiry (PEXPIRE):
// InFlightTTL while in flight, TTL once completed or uncertain. Memory is
// bounded by those expiries and MaxStoredBody; run Redis with the
// noeviction policy (or give the ledger a Redis of its own), since a
// record evicted while in flight frees its key early.
//
// When Redis cannot answer within the timeout, Begin returns an error
// wrapping ErrUnavailable, and the transport refuses the request
// (retryfuse.ErrLedgerUnavailable) rather than treat the key as free; an
// error of Complete, Release or Uncertain is reported through
// Hooks.EvidenceUnavailable, and the key's record then ends with its
// InFlightTTL.
//
// Create it with NewLedger. This type is concurrency safe.
type Ledger struct {
	client        redis.Scripter
	prefix        string
	ttlMillis     int64
	flightMillis  int64
	maxStoredBody int
	timeout       time.Duration
}

var _ retryfuse.Ledger = (*Ledger)(nil)

// NewLedger returns a Ledger. A nil client, a client without
// ContextTimeoutEnabled, or a negative setting gives an error wrapping
// retryfuse.ErrInvalidPolicy that names the field.
func NewLedger(client redis.UniversalClient, cfg LedgerConfig) (*Ledger, error) {
	if err := checkClient(client); err != nil {
		return nil, err
	}
	switch {
	case cfg.TTL < 0:
		return nil, invalid("LedgerConfig.TTL", "must not be negative")
	case cfg.InFlightTTL < 0:
		return nil, invalid("LedgerConfig.InFlightTTL", "must not be negative")
	case cfg.MaxStoredBody < 0:
		return nil, invalid("LedgerConfig.MaxStoredBody", "must not be negative")
	}
	timeout, err := resolveTimeout("LedgerConfig.Timeout", cfg.Timeout)
	if err != nil {
		return nil, err
	}
	l := &Ledger{
		client:        client,
		prefix:        cfg.Prefix,
		ttlMillis:     ceilMillis(orDefault(cfg.TTL, defaultLedgerTTL)),
		flightMillis:  ceilMillis(orDefault(cfg.InFlightTTL, defaultLedgerInFlightTTL)),
		maxStoredBody: cfg.MaxStoredBody,
		timeout:       timeout,
	}
	if l.prefix == "" {
		l.prefix = DefaultLedgerPrefix
	}
	if l.maxStoredBody == 0 {
		l.maxStoredBody = defaultLedgerMaxStoredBody
	}
	return l, nil
}

// Key returns the Redis key of the record of an idempotency key.
func (l *Ledger) Key(key string) string { return l.prefix + key }

// Begin claims key when it is free (KeyNone, with a token), else reports
// its state; a fingerprint other than the stored one is KeyConflict
// whatever the state. An empty key is an error wrapping
// retryfuse.ErrInvalidIdempotencyKey; a Redis failure, an error wrapping
// ErrUnavailable.
func (l *Ledger) Begin(ctx context.Context, key string, fp retryfuse.Fingerprint) (retryfuse.LedgerClaim, error) {
	if key == "" {
		return retryfuse.LedgerClaim{}, fmt.Errorf("%w: empty key", retryfuse.ErrInvalidIdempotencyKey)
	}
	token := rand.Text()
	v, err := run(ctx, l.client, l.timeout, ledgerBeginScript, []string{l.Key(key)}, string(fp[:]), token, l.flightMillis)
	if err != nil {
		return retryfuse.LedgerClaim{}, err
	}
	reply, _ := v.([]any)
	if len(reply) == 0 {
		return retryfuse.LedgerClaim{}, unexpected(v)
	}
	code, _ := reply[0].(int64)
	switch code {
	case 0:
		return retryfuse.LedgerClaim{State: decide.KeyNone, Token: token}, nil
	case 1:
		return retryfuse.LedgerClaim{State: decide.KeyInFlight}, nil
	case 2:
		cl := retryfuse.LedgerClaim{State: decide.KeyInFlight, Uncertain: true}
		if len(reply) > 1 {
			cl.Token, _ = reply[1].(string)
		}
		return cl, nil
	case 3:
		cl := retryfuse.LedgerClaim{State: decide.KeyCompleted}
		if len(reply) > 1 && reply[1] != nil {
			enc, _ := reply[1].(string)
			res, err := decodeResponse([]byte(enc))
			if err != nil {
				return retryfuse.LedgerClaim{}, fmt.Errorf("%w: key %q: %w", ErrUnavailable, key, err)
			}
			cl.Stored = res
		}
		return cl, nil
	case 4:
		return retryfuse.LedgerClaim{State: decide.KeyConflict}, nil
	}
	return retryfuse.LedgerClaim{}, unexpected(v)
}

// Complete ends a claim with a confirmed result, stored (encoded) when
// res is not nil, its body is at most MaxStoredBody bytes and its headers
// at most 100 values and 32 KiB; the record is then kept for TTL.
func (l *Ledger) Complete(ctx context.Context, key, token string, res *retryfuse.StoredResponse) error {
	if res != nil && len(res.Body) <= l.maxStoredBody && storableHeader(res.Header) {
		return l.end(ctx, key, token, "complete", encodeResponse(res))
	}
	return l.end(ctx, key, token, "complete")
}

// Release ends a claim that took no effect: the key is free again.
func (l *Ledger) Release(ctx context.Context, key, token string) error {
	return l.end(ctx, key, token, "release")
}

// Uncertain ends a claim whose outcome is unknown: the key is held (Begin
// answers KeyInFlight with Uncertain) for TTL.
func (l *Ledger) Uncertain(ctx context.Context, key, token string) error {
	return l.end(ctx, key, token, "uncertain")
}

// end runs the end script. A token that does not own the key is an error
// wrapping retryfuse.ErrLedgerToken; a Redis failure, one wrapping
// ErrUnavailable.
func (l *Ledger) end(ctx context.Context, key, token, op string, stored ...any) error {
	args := append([]any{op, token, l.ttlMillis}, stored...)
	v, err := run(ctx, l.client, l.timeout, ledgerEndScript, []string{l.Key(key)}, args...)
	if err != nil {
		return err
	}
	switch v {
	case int64(1):
		return nil
	case int64(0):
		return fmt.Errorf("%w: key %q", retryfuse.ErrLedgerToken, key)
	}
	return unexpected(v)
}

// The bounds of a stored result's headers, as the core's MemoryLedger
// keeps them: a result with larger headers completes the key without a
// stored result.
const (
	maxStoredHeaderFields = 100
	maxStoredHeaderBytes  = 32 << 10
)

// storableHeader reports whether h is within those bounds.
func storableHeader(h http.Header) bool {
	fields, size := 0, 0
	for name, values := range h {
		for _, v := range values {
			fields++
			size += len(name) + len(v)
		}
		if fields > maxStoredHeaderFields || size > maxStoredHeaderBytes {
			return false
		}
	}
	return true
}
