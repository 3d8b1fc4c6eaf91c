package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/sentinel"
	"github.com/retryfuse/retryfuse/internal/stored"
)

// errFull: the ledger holds its maximum number of keys and every one of
// them is in flight, so none may be evicted. A Transport sends nothing,
// and returns it wrapped with ErrUnavailable.
var errFull = errors.New("retryfuse: idempotency ledger full of keys in flight")

// Defaults of a Memory's settings.
const (
	defaultMaxEntries    = 10000
	defaultTTL           = 24 * time.Hour
	defaultInFlightTTL   = 5 * time.Minute
	defaultMaxStoredBody = 64 << 10
)

func (l *Memory) maxEntries() int            { return orDefault(l.MaxEntries, defaultMaxEntries) }
func (l *Memory) ttl() time.Duration         { return orDefault(l.TTL, defaultTTL) }
func (l *Memory) inFlightTTL() time.Duration { return orDefault(l.InFlightTTL, defaultInFlightTTL) }
func (l *Memory) maxStoredBody() int         { return orDefault(l.MaxStoredBody, defaultMaxStoredBody) }

// orDefault returns v, or def when v is zero.
func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Memory is a Ledger held in this process's memory, bounded by
// MaxEntries. It uses one mutex and no goroutines: keys expire lazily, when
// they are next looked at or when room is needed; a claim that expires
// becomes uncertain (see InFlightTTL). It never blocks on I/O and
// does not look at its contexts. A clock that goes backwards only keeps keys
// longer.
//
// The zero value is usable and has the default settings; every zero
// setting means its default, and a negative one is invalid (Begin and
// Validate, which a retryfuse.Transport's Validate calls, return an error
// wrapping retryfuse.ErrInvalidPolicy that names it). The settings must not
// be changed once the ledger is in use. This type is concurrency safe.
type Memory struct {
	// MaxEntries bounds the number of keys held. Zero means 10000. When the
	// ledger is full, a new key first drops the expired keys, then evicts the
	// least recently used completed or uncertain key. A key in flight is
	// never evicted: when every key is in flight, Begin fails (the
	// Transport then returns an error wrapping ErrUnavailable).
	MaxEntries int
	// TTL is how long a completed or uncertain key is kept, counted from
	// Complete or Uncertain. Zero means 24h, the time large payment APIs keep
	// idempotency keys for. Afterwards the key is free again.
	TTL time.Duration
	// InFlightTTL is how long an owner may hold a key, counted from Begin.
	// Zero means 5m. A claim not ended by then expires uncertain, never
	// free: the request may have been sent and applied, and its result
	// never recorded. The key is then held as after Uncertain, for TTL
	// from the claim's expiry (a later Begin gets KeyInFlight with
	// Uncertain), and the owner's token may still end it with Complete,
	// Release or Uncertain. Set it above the longest a call (all its
	// attempts and waits) may take, or a slow call's key is reported
	// uncertain before the call has ended.
	InFlightTTL time.Duration
	// MaxStoredBody bounds the bytes of body stored per completed key. Zero
	// means 64 KiB. A response with a larger body completes the key without
	// a stored result (Claim.Stored nil): a later call under the key is
	// not replayed, and the transport asks the caller to reconcile instead.
	// Headers are bounded too, to 100 values and 32 KiB of names and
	// values: larger ones complete the key without a stored result.
	MaxStoredBody int

	mu  sync.Mutex // guards everything below
	m   map[string]*ledgerEntry
	lru ledgerEntry // sentinel of the list of completed and uncertain entries, most recently used first
	seq uint64      // last token issued
	// vseq is the last Version issued: a counter of its own, so that a
	// Version says nothing of a token.
	vseq uint64
	// soonest is a lower bound of every entry's expiry (valid when
	// haveSoonest): before it, a sweep for expired entries finds none.
	soonest     time.Time
	haveSoonest bool
}

var _ Ledger = (*Memory)(nil)

type entryState uint8

const (
	entryInFlight entryState = iota
	entryUncertain
	entryCompleted
)

type ledgerEntry struct {
	key     string
	fp      Fingerprint
	state   entryState
	token   string // the owner's, while in flight or uncertain
	lapsed  bool   // uncertain because its claim expired: the owner may still report Uncertain
	expires time.Time
	since   time.Time       // when it entered its state (see KeyInfo.Since)
	ver     uint64          // changes with its state (see KeyInfo.Version)
	stored  *StoredResponse // never changed once set: it is copied on the way out without the lock
	prev    *ledgerEntry    // LRU links, only for completed and uncertain entries
	next    *ledgerEntry
}

// Validate returns an error wrapping retryfuse.ErrInvalidPolicy that
// names the first negative setting, nil when there is none. A
// retryfuse.Transport calls it from its own Validate.
func (l *Memory) Validate() error {
	switch {
	case l.MaxEntries < 0:
		return sentinel.InvalidPolicy("Memory.MaxEntries", "must not be negative")
	case l.TTL < 0:
		return sentinel.InvalidPolicy("Memory.TTL", "must not be negative")
	case l.InFlightTTL < 0:
		return sentinel.InvalidPolicy("Memory.InFlightTTL", "must not be negative")
	case l.MaxStoredBody < 0:
		return sentinel.InvalidPolicy("Memory.MaxStoredBody", "must not be negative")
	}
	return nil
}

// lazyInit prepares the map and the list; l.mu must be held.
func (l *Memory) lazyInit() {
	if l.m == nil {
		l.m = make(map[string]*ledgerEntry)
		l.lru.prev, l.lru.next = &l.lru, &l.lru
	}
}

// Begin implements Ledger. An empty key is an error wrapping
// retryfuse.ErrInvalidIdempotencyKey; a new key when every held key is in
// flight is an error that says the ledger is full.
func (l *Memory) Begin(_ context.Context, key string, fp Fingerprint) (Claim, error) {
	return l.BeginAt(key, fp, time.Now())
}

// BeginAt is Begin at the time now.
func (l *Memory) BeginAt(key string, fp Fingerprint, now time.Time) (Claim, error) {
	if key == "" {
		return Claim{}, fmt.Errorf("%w: empty key", sentinel.ErrInvalidIdempotencyKey)
	}
	if err := l.Validate(); err != nil {
		return Claim{}, err
	}
	l.mu.Lock()
	l.lazyInit()
	e := l.live(key, now)
	if e != nil {
		if e.fp != fp {
			l.mu.Unlock()
			return Claim{State: decide.KeyConflict}, nil
		}
		switch e.state {
		case entryInFlight:
			l.mu.Unlock()
			return Claim{State: decide.KeyInFlight}, nil
		case entryUncertain:
			l.moveToFront(e)
			token := e.token
			l.mu.Unlock()
			return Claim{State: decide.KeyInFlight, Uncertain: true, Token: token}, nil
		default:
			l.moveToFront(e)
			stored := e.stored
			l.mu.Unlock()
			return Claim{State: decide.KeyCompleted, Stored: stored.clone()}, nil
		}
	}
	if len(l.m) >= l.maxEntries() && !l.makeRoom(now) {
		l.mu.Unlock()
		return Claim{}, fmt.Errorf("%w (%d keys)", errFull, l.maxEntries())
	}
	l.seq++
	token := strconv.FormatUint(l.seq, 36)
	l.vseq++
	e = &ledgerEntry{key: key, fp: fp, state: entryInFlight, token: token, since: now, ver: l.vseq}
	l.setExpiry(e, now.Add(l.inFlightTTL()))
	l.m[key] = e
	l.mu.Unlock()
	return Claim{State: decide.KeyNone, Token: token}, nil
}

// Complete implements Ledger. A res whose body is longer than MaxStoredBody
// completes the key without a stored result.
func (l *Memory) Complete(_ context.Context, key, token string, res *StoredResponse) error {
	return l.completeAt(key, token, res, time.Now())
}

// completeAt is Complete at the time now: res is stored as a copy.
func (l *Memory) completeAt(key, token string, res *StoredResponse, now time.Time) error {
	var stored *StoredResponse
	if l.storable(res) {
		stored = res.clone() // before taking the lock
	}
	return l.store(key, token, stored, now)
}

// CompleteAt is Complete at the time now for a result that the caller
// hands over, never touching it again (res, its Header and its Body), as
// bytes.NewBuffer takes its slice: the ledger keeps it as it is, without
// Complete's copy, but for a body whose slice has room beyond its length
// (which would be kept too). A retryfuse.Transport completes its keys so,
// with the result it has just made.
func (l *Memory) CompleteAt(key, token string, res *StoredResponse, now time.Time) error {
	if !l.storable(res) {
		res = nil
	} else if cap(res.Body) > len(res.Body) {
		res.Body = append(make([]byte, 0, len(res.Body)), res.Body...)
	}
	return l.store(key, token, res, now)
}

// storable reports whether res is a result the ledger stores: within
// MaxStoredBody and the bounds of the headers.
func (l *Memory) storable(res *StoredResponse) bool {
	return res != nil && len(res.Body) <= l.maxStoredBody() && stored.HeaderFits(res.Header)
}

// store completes key with stored, which is kept as it is.
func (l *Memory) store(key, token string, stored *StoredResponse, now time.Time) error {
	return l.end(key, token, now, true, func(e *ledgerEntry) {
		e.state, e.token, e.stored = entryCompleted, "", stored
		l.mark(e, now)
		l.setExpiry(e, now.Add(l.ttl()))
		l.moveToFront(e)
	})
}

// Release implements Ledger: the key is free again.
func (l *Memory) Release(_ context.Context, key, token string) error {
	return l.ReleaseAt(key, token, time.Now())
}

// ReleaseAt is Release at the time now.
func (l *Memory) ReleaseAt(key, token string, now time.Time) error {
	return l.end(key, token, now, true, l.remove)
}

// Uncertain implements Ledger: the key is held for TTL from now.
func (l *Memory) Uncertain(_ context.Context, key, token string) error {
	return l.UncertainAt(key, token, time.Now())
}

// UncertainAt is Uncertain at the time now: the key is held for TTL from
// now.
func (l *Memory) UncertainAt(key, token string, now time.Time) error {
	return l.end(key, token, now, false, func(e *ledgerEntry) {
		l.mark(e, now)
		if e.state == entryUncertain { // its claim expired before this call: held for TTL from now
			l.setExpiry(e, now.Add(l.ttl()))
			l.moveToFront(e)
			return
		}
		e.state = entryUncertain // the token stays: it may end the claim once the outcome is known
		l.setExpiry(e, now.Add(l.ttl()))
		l.pushFront(e)
	})
}

// Len returns the number of keys held now, the expired ones dropped
// first: in flight, uncertain and completed.
func (l *Memory) Len() int { return l.lenAt(time.Now()) }

// lenAt is Len at the time now.
func (l *Memory) lenAt(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lazyInit()
	l.sweep(now)
	return len(l.m)
}

// end applies f to key's entry, under the lock, if token owns it: in
// flight; or uncertain when settled is true (its outcome has since been
// learnt); or uncertain because its claim expired (the owner reports late).
func (l *Memory) end(key, token string, now time.Time, settled bool, f func(e *ledgerEntry)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lazyInit()
	e := l.live(key, now)
	if e == nil || e.token != token || !(e.state == entryInFlight || e.state == entryUncertain && (settled || e.lapsed)) {
		return fmt.Errorf("%w: key %q", ErrToken, key)
	}
	e.lapsed = false
	f(e)
	return nil
}

// live returns key's entry, dropping it when it has expired; a claim that
// expired is uncertain instead (lapse).
func (l *Memory) live(key string, now time.Time) *ledgerEntry {
	e := l.m[key]
	if e != nil && !now.Before(e.expires) && !l.lapse(e, now) {
		l.remove(e)
		return nil
	}
	return e
}

// lapse turns an expired claim (in flight) into an uncertain key held for
// TTL from the claim's expiry, the owner's token kept to end it. It
// reports false, changing nothing, for any other entry, and for a claim
// whose uncertain time has passed too.
func (l *Memory) lapse(e *ledgerEntry, now time.Time) bool {
	if e.state != entryInFlight {
		return false
	}
	until := e.expires.Add(l.ttl())
	if !now.Before(until) {
		return false
	}
	e.state, e.lapsed, e.since = entryUncertain, true, e.expires
	l.setExpiry(e, until)
	l.pushFront(e)
	return true
}

// makeRoom frees one place in a full ledger: it drops the expired entries,
// then evicts the least recently used completed or uncertain entry. It
// reports false when every entry is in flight.
func (l *Memory) makeRoom(now time.Time) bool {
	l.sweep(now)
	if len(l.m) < l.maxEntries() {
		return true
	}
	if oldest := l.lru.prev; oldest != &l.lru {
		l.remove(oldest)
		return true
	}
	return false
}

// sweep drops every expired entry, unless none can have expired yet.
func (l *Memory) sweep(now time.Time) {
	if !l.haveSoonest || now.Before(l.soonest) {
		return
	}
	l.haveSoonest = false
	for _, e := range l.m {
		if !now.Before(e.expires) && !l.lapse(e, now) {
			l.remove(e)
		} else if !l.haveSoonest || e.expires.Before(l.soonest) {
			l.soonest, l.haveSoonest = e.expires, true
		}
	}
}

func (l *Memory) setExpiry(e *ledgerEntry, t time.Time) {
	e.expires = t
	if !l.haveSoonest || t.Before(l.soonest) {
		l.soonest, l.haveSoonest = t, true
	}
}

func (l *Memory) remove(e *ledgerEntry) {
	delete(l.m, e.key)
	l.unlink(e)
}

func (l *Memory) pushFront(e *ledgerEntry) {
	e.prev, e.next = &l.lru, l.lru.next
	e.prev.next, e.next.prev = e, e
}

func (l *Memory) moveToFront(e *ledgerEntry) {
	l.unlink(e)
	l.pushFront(e)
}

func (l *Memory) unlink(e *ledgerEntry) {
	if e.prev != nil {
		e.prev.next, e.next.prev = e.next, e.prev
		e.prev, e.next = nil, nil
	}
}
