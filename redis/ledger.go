package retryfuseredis

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/stored"
	"github.com/retryfuse/retryfuse/ledger"
)

//go:embed lua/ledger_guard.lua
var ledgerGuardSource string

//go:embed lua/ledger_begin.lua
var ledgerBeginSource string

//go:embed lua/ledger_end.lua
var ledgerEndSource string

// The begin and end scripts run after the guard (ledger_guard.lua), in the
// same script: the check that Redis still holds the ledger's data is
// atomic with the step.
var (
	ledgerBeginScript = redis.NewScript(ledgerGuardSource + ledgerBeginSource)
	ledgerEndScript   = redis.NewScript(ledgerGuardSource + ledgerEndSource)
)

// Defaults of LedgerConfig, those of ledger.Memory's settings.
const (
	DefaultLedgerPrefix        = "retryfuse:ledger:"
	defaultLedgerTTL           = 24 * time.Hour
	defaultLedgerInFlightTTL   = 5 * time.Minute
	defaultLedgerMaxStoredBody = 64 << 10
	defaultLedgerMaxPending    = 10000
)

// ErrClosed is wrapped by the error of Begin on a closed Ledger.
var ErrClosed = errors.New("retryfuseredis: ledger closed")

// Ledger is a ledger.Ledger kept in Redis, shared by every process that
// uses the same Redis and Prefix: a duplicate sent by another replica
// while the key is in flight is braked (retryfuse.ErrDuplicateInFlight),
// and once the key is completed it gets the stored result.
//
// Each call is one round trip: one script (EVALSHA), so that looking a key
// up and claiming it (Begin), and checking the owner's token and ending the
// claim (Complete, Release, Uncertain), are each atomic, together with the
// check that Redis still holds the ledger's data (see LedgerConfig.Quarantine).
// Owner tokens are 128 random bits (crypto/rand), made before the script
// runs, so that a Begin sent again finds its own claim. Every record
// carries an expiry (PEXPIRE): InFlightTTL + TTL from its claim, TTL once
// completed or uncertain.
//
// What it never forgets:
//   - A claim not ended within InFlightTTL is uncertain for TTL, never
//     free (ledger.Memory.InFlightTTL says why).
//   - A Complete, Release or Uncertain that Redis could not take returns an
//     error wrapping ErrUnavailable and is retried in the background (a
//     bounded queue, with backoff) until Redis takes it or the key's TTL
//     passes; Close flushes the queue. One given a context that had
//     already ended returns an error wrapping ErrContextEnded, and is sent
//     from the queue at once.
//   - A Begin that failed (timed out, connection lost) may still run once
//     Redis answers again: its claim is cancelled in the background, and a
//     later Begin of this process on the same key takes it over, so that
//     no caller is braked by a request that was never sent.
//   - Records that Redis lost (restarted without persistence, a snapshot
//     restored, a failover to a lagging replica) are noticed, and the
//     ledger refuses every Begin for a quarantine rather than take the
//     lost keys to be free, until it ends, or until an operator who has
//     reconciled them ends it (EndQuarantine).
//
// Keys are hash-tagged (see Key) so that it works on Redis Cluster.
//
// Create it with NewLedger and end it with Close. This type is concurrency
// safe.
type Ledger struct {
	client        redis.UniversalClient
	prefix        string
	ttl           time.Duration
	flight        time.Duration
	ttlMillis     int64
	flightMillis  int64
	lifeMillis    int64 // flight + ttl: a record's life from its claim
	maxStoredBody int
	timeout       time.Duration
	onUnrecorded  func(key string, err error)
	guard         guard
	pending       pending
}

var _ ledger.Ledger = (*Ledger)(nil)

// NewLedger returns a Ledger. A nil client, a client without
// ContextTimeoutEnabled, or a negative setting gives an error wrapping
// retryfuse.ErrInvalidPolicy that names the field.
//
// NewLedger talks to Redis (within 5s, or Timeout when longer): it checks
// that every server the client reaches persists its data (CONFIG GET
// appendonly; skipped where CONFIG is not permitted), refusing one that
// does not with an error wrapping retryfuse.ErrInvalidPolicy unless
// AllowWithoutPersistence is set, and it reads (or makes) the markers by
// which lost data is noticed. A Redis that cannot be reached is an error
// wrapping ErrUnavailable.
func NewLedger(client redis.UniversalClient, cfg LedgerConfig) (*Ledger, error) {
	if err := checkClient(client); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	timeout, err := resolveTimeout("LedgerConfig.Timeout", cfg.Timeout)
	if err != nil {
		return nil, err
	}
	ttl := orDefault(cfg.TTL, defaultLedgerTTL)
	flight := orDefault(cfg.InFlightTTL, defaultLedgerInFlightTTL)
	l := &Ledger{
		client:        client,
		prefix:        cfg.Prefix,
		ttl:           ttl,
		flight:        flight,
		ttlMillis:     ceilMillis(ttl),
		flightMillis:  ceilMillis(flight),
		lifeMillis:    ceilMillis(addSat(flight, ttl)),
		maxStoredBody: cfg.MaxStoredBody,
		timeout:       timeout,
		onUnrecorded:  cfg.OnUnrecorded,
	}
	if l.prefix == "" {
		l.prefix = DefaultLedgerPrefix
	}
	if l.maxStoredBody == 0 {
		l.maxStoredBody = defaultLedgerMaxStoredBody
	}
	l.guard.init(orDefault(cfg.Quarantine, addSat(flight, ttl)), cfg.OnDataLost, cfg.OnQuarantineEnd)
	l.pending.init(l, cfg.MaxPending)
	watchDials(client)

	ctx, cancel := context.WithTimeout(context.Background(), max(startupTimeout, timeout))
	defer cancel()
	if !cfg.AllowWithoutPersistence {
		if err := checkPersistence(ctx, client); err != nil {
			return nil, err
		}
	}
	if err := l.guard.adopt(ctx, l); err != nil && !errors.Is(err, ErrDataLost) {
		return nil, err // in a quarantine already, the ledger starts in it
	}
	return l, nil
}

// startupTimeout bounds NewLedger's talk with Redis, unless Timeout is
// longer.
const startupTimeout = 5 * time.Second

// Key returns the Redis key of the record of an idempotency key: Prefix,
// the hash tag of the key's bucket ("{" two hex digits "}", one of 64),
// ":" and the key. Every record of a bucket, and the bucket's marker
// (Prefix and the tag alone), are in one Redis Cluster slot.
func (l *Ledger) Key(key string) string { return l.prefix + bucketTag(bucketOf(key)) + ":" + key }

// Begin claims key when it is free (KeyNone, with a token), else reports
// its state; a fingerprint other than the stored one is KeyConflict
// whatever the state. An empty key is an error wrapping
// retryfuse.ErrInvalidIdempotencyKey; a context that had already ended,
// one wrapping ErrContextEnded (nothing is sent); a Redis failure, one
// wrapping ErrUnavailable; during a quarantine after lost data, one
// wrapping ErrDataLost; after Close, one wrapping ErrClosed (each of the
// last three wraps ledger.ErrUnavailable too).
func (l *Ledger) Begin(ctx context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, error) {
	if key == "" {
		return ledger.Claim{}, fmt.Errorf("%w: empty key", retryfuse.ErrInvalidIdempotencyKey)
	}
	if l.pending.isClosed() {
		return ledger.Claim{}, fmt.Errorf("%w: %w", ledger.ErrUnavailable, ErrClosed)
	}
	if ctx.Err() != nil {
		return ledger.Claim{}, contextEnded(ctx, "Begin") // nothing sent, nothing to cancel
	}
	if err := l.guard.ready(ctx, l); err != nil {
		return ledger.Claim{}, asLedgerUnavailable(err)
	}
	b := bucketOf(key)
	token := rand.Text()
	superseded := l.pending.cancelled(key)
	reply, err := l.guarded(ctx, ledgerBeginScript, key, b, string(fp[:]), token, l.flightMillis, l.lifeMillis, superseded)
	if err != nil {
		if errors.Is(err, ErrUnavailable) && !neverSent(err) {
			// The script may run yet, once Redis answers: cancel its claim,
			// since the caller, told of the failure, sends nothing.
			l.pending.add(key, token, opCancel, nil, err, false)
		}
		return ledger.Claim{}, asLedgerUnavailable(err)
	}
	code, _ := reply[0].(int64)
	switch code {
	case 0:
		return ledger.Claim{State: decide.KeyNone, Token: token}, nil
	case 1:
		return ledger.Claim{State: decide.KeyInFlight}, nil
	case 2:
		cl := ledger.Claim{State: decide.KeyInFlight, Uncertain: true}
		if len(reply) > 1 {
			cl.Token, _ = reply[1].(string)
		}
		return cl, nil
	case 3:
		cl := ledger.Claim{State: decide.KeyCompleted}
		if len(reply) > 1 && reply[1] != nil {
			enc, _ := reply[1].(string)
			res, err := decodeResponse([]byte(enc))
			if err != nil {
				return ledger.Claim{}, fmt.Errorf("%w: key %q: %w", ErrUnavailable, key, err)
			}
			cl.Stored = res
		}
		return cl, nil
	case 4:
		return ledger.Claim{State: decide.KeyConflict}, nil
	}
	return ledger.Claim{}, unexpected(reply)
}

// neverSent reports whether err proves that a script never left this
// process: no connection was obtained (a refused or failed dial). Any
// other failure may have come after the script was written.
func neverSent(err error) bool {
	var u *unavailableError
	if errors.As(err, &u) {
		err = u.err // not the client's last dial, which may have been another call's
	}
	return isDialError(err)
}

// Complete ends a claim with a confirmed result, stored (encoded) when
// res is not nil, its body is at most MaxStoredBody bytes and its headers
// at most 100 values and 32 KiB; the record is then kept for TTL.
func (l *Ledger) Complete(ctx context.Context, key, token string, res *ledger.StoredResponse) error {
	if res != nil && len(res.Body) <= l.maxStoredBody && stored.HeaderFits(res.Header) {
		return l.end(ctx, key, token, opComplete, encodeResponse(res))
	}
	return l.end(ctx, key, token, opComplete, nil)
}

// Release ends a claim that took no effect: the key is free again.
func (l *Ledger) Release(ctx context.Context, key, token string) error {
	return l.end(ctx, key, token, opRelease, nil)
}

// Uncertain ends a claim whose outcome is unknown: the key is held (Begin
// answers KeyInFlight with Uncertain) for TTL.
func (l *Ledger) Uncertain(ctx context.Context, key, token string) error {
	return l.end(ctx, key, token, opUncertain, nil)
}

// end runs the end script. A token that does not own the key is an error
// wrapping ledger.ErrToken; a Redis failure, one wrapping
// ErrUnavailable, and the step is then retried in the background. A
// context that had ended is an error wrapping ErrContextEnded: nothing is
// sent, and the background retries the step at once, with a context of
// its own.
func (l *Ledger) end(ctx context.Context, key, token string, op ledgerOp, stored []byte) error {
	if ctx.Err() != nil {
		e := contextEnded(ctx, op.method())
		e.queued = l.pending.add(key, token, op, stored, e, true)
		return e
	}
	err := l.endOnce(ctx, key, token, op, stored)
	if errors.Is(err, ErrUnavailable) && l.pending.add(key, token, op, stored, err, false) {
		return fmt.Errorf("%w; retried in the background", err)
	}
	return err
}

// endOnce runs the end script once.
func (l *Ledger) endOnce(ctx context.Context, key, token string, op ledgerOp, stored []byte) error {
	args := []any{op.String(), token, l.ttlMillis, l.flightMillis}
	if stored != nil {
		args = append(args, stored)
	}
	reply, err := l.guarded(ctx, ledgerEndScript, key, bucketOf(key), args...)
	if err != nil {
		return err
	}
	switch reply[0] {
	case int64(1):
		return nil
	case int64(0):
		return fmt.Errorf("%w: key %q", ledger.ErrToken, key)
	}
	return unexpected(reply)
}

// guarded runs a script that begins with the guard on key's record and
// its bucket's marker, and returns its reply past the guard, having
// noted the marker's count. A marker of another id whose quarantine is
// over is adopted and the script run again, once. Lost data is an error
// wrapping ErrDataLost.
func (l *Ledger) guarded(ctx context.Context, s *redis.Script, key string, b int, args ...any) ([]any, error) {
	keys := []string{l.Key(key), l.markerKey(b)}
	for range 2 {
		id, seen, fresh := l.guard.marker(b)
		v, err := run(ctx, l.client, l.timeout, s, keys, append([]any{id, seen, fresh, l.guard.quarantineMillis}, args...)...)
		if err != nil {
			return nil, err
		}
		reply, _ := v.([]any)
		if len(reply) < 2 {
			return nil, unexpected(v)
		}
		code, _ := reply[0].(int64)
		switch code {
		case -1:
			left, _ := reply[1].(int64)
			return nil, l.guard.lost(keys[1], time.Duration(left)*time.Millisecond)
		case -2:
			if len(reply) < 3 {
				return nil, unexpected(v)
			}
			newID, _ := reply[1].(string)
			n, _ := reply[2].(int64)
			l.guard.replace(b, id, newID, n)
			continue
		}
		seq, _ := reply[1].(int64)
		l.guard.saw(b, id, seq)
		return append(reply[:1:1], reply[2:]...), nil
	}
	return nil, fmt.Errorf("%w: the marker of %s changed twice", ErrUnavailable, l.markerKey(b))
}
