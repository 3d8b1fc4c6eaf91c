package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is what an operator asks of a ledger: a key's state
// (Inspector) and a stuck key settled by hand (Settler), beside the
// Ledger contract that calls use.

// State is the state of a key as an operator sees it.
type State uint8

const (
	// StateFree: the ledger holds nothing for the key (never used, released,
	// or its time has passed).
	StateFree State = iota
	// StateInFlight: a call owns the key now; its claim has not expired.
	StateInFlight
	// StateUncertain: a call under the key ended with an uncertain outcome,
	// or its claim expired without a recorded result. The key is neither
	// applied nor free until it expires or is settled.
	StateUncertain
	// StateCompleted: a call under the key got a confirmed result (the
	// effect was applied), stored or not.
	StateCompleted
)

var stateNames = [...]string{"free", "in_flight", "uncertain", "completed"}

// String returns the state's name: free, in_flight, uncertain or
// completed.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText returns the state's name.
func (s State) MarshalText() ([]byte, error) {
	if int(s) >= len(stateNames) {
		return nil, fmt.Errorf("retryfuse: unknown ledger state %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText reads a state's name.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if string(b) == n {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("retryfuse: unknown ledger state %q (want free, in_flight, uncertain or completed)", b)
}

// KeyInfo is what a ledger holds for a key, read-only. It never carries
// the owner's token.
type KeyInfo struct {
	Key   string
	State State
	// Fingerprint of what was sent under the key; zero when free.
	Fingerprint Fingerprint
	// Since is when the key entered its state: the claim (in flight),
	// the claim's expiry or the owner's Uncertain (uncertain), Complete
	// (completed). Zero when free. Age is measured from it.
	Since time.Time
	// Expires is when the state ends by itself: an in-flight claim turns
	// uncertain then; an uncertain or completed key is free then. Zero
	// when free.
	Expires time.Time
	// Lapsed, with StateUncertain: uncertain because its claim expired
	// (the owner never reported), rather than by the owner's Uncertain.
	Lapsed bool
	// HasStored, with StateCompleted: a result is stored and is replayed
	// for a later call under the key. StoredStatus is its status code.
	HasStored    bool
	StoredStatus int
	// Version identifies the key's state: it changes on every change of
	// state (and on every new claim), and is empty when free. Settle
	// takes the Version the operator saw and refuses to act on another.
	Version string
	// Now is the time of the store's clock at which the key was read, so
	// that ages are measured on the clock that set Since.
	Now time.Time
}

// Age is how long the key has been in its state at the time it was read
// (zero when free).
func (k KeyInfo) Age() time.Duration {
	if k.Since.IsZero() || k.Now.Before(k.Since) {
		return 0
	}
	return k.Now.Sub(k.Since)
}

// Query selects keys for Inspector.List: one page of the store's keys,
// in the store's order, filtered.
type Query struct {
	// State selects keys in this state; StateFree (zero) selects every
	// key the store holds (in flight, uncertain or completed).
	State State
	// MinAge selects keys in their state for at least this long (see
	// KeyInfo.Age). Zero selects any age.
	MinAge time.Duration
	// Limit bounds the records one page examines, matching or not. Zero
	// means 100; above MaxListLimit is invalid.
	Limit int
	// Cursor continues from the page that returned it; empty starts at
	// the beginning.
	Cursor string
}

// MaxListLimit is the largest Query.Limit: a page never examines more
// records than this.
const MaxListLimit = 1000

// Page is one page of Inspector.List.
type Page struct {
	// Keys are the selected keys among the records the page examined:
	// fewer than Limit, or none, when others did not match.
	Keys []KeyInfo
	// Cursor continues the listing with the next page; empty when the
	// listing is over.
	Cursor string
}

// Inspector reads a ledger's keys without changing them. ledger.Memory,
// and the Ledgers of the redis and sql modules, implement it; a ledger
// of a user's own store may too, and package ledgertest then checks it.
type Inspector interface {
	// Lookup returns key's state (StateFree, with only Key and Now set,
	// when the ledger holds nothing for it). A store that cannot answer
	// gives an error wrapping ErrUnavailable.
	Lookup(ctx context.Context, key string) (KeyInfo, error)
	// List returns one page of keys selected by q. Each page examines at
	// most q.Limit records, so that listing never scans a store without a
	// bound: follow Cursor until it is empty to see every key. A key
	// changed during a listing may be seen in its old state, or missed,
	// or seen twice.
	List(ctx context.Context, q Query) (Page, error)
}

// Outcome is what an operator learnt of a stuck key's call.
type Outcome uint8

const (
	// Applied: the effect happened; the key is completed (for the
	// ledger's TTL) and a later call under it is replayed (with the
	// stored result given) or asked to reconcile (without one).
	Applied Outcome = iota + 1
	// NotApplied: the effect did not happen; the key is free.
	NotApplied
)

// Settlement is an operator's verdict on a stuck key.
type Settlement struct {
	Outcome Outcome
	// Stored, with Applied, is the result to replay for later calls
	// under the key (kept as a copy, within the ledger's bounds); nil
	// means none: later calls are asked to reconcile.
	Stored *StoredResponse
}

// ErrSettleRefused is wrapped by the error of Settle when the key is not
// in the state the operator saw (see SettleRefusedError).
var ErrSettleRefused = errors.New("retryfuse: ledger refused to settle the key")

// SettleRefusedError is the error of Settle on a key whose Version is no
// longer the one given (another operator, the owner or its expiry
// changed it), or whose state cannot be settled (free or completed). It
// carries the key as Settle found it. It wraps ErrSettleRefused.
type SettleRefusedError struct {
	Found KeyInfo
	// Version is the Version the caller gave.
	Version string
}

func (e *SettleRefusedError) Error() string {
	if e.Found.Version != e.Version {
		return fmt.Sprintf("%v: key %q is %s (version %q), not at the version seen (%q)",
			ErrSettleRefused, e.Found.Key, e.Found.State, e.Found.Version, e.Version)
	}
	return fmt.Sprintf("%v: key %q is %s: only an in-flight or uncertain key can be settled",
		ErrSettleRefused, e.Found.Key, e.Found.State)
}

func (e *SettleRefusedError) Unwrap() error { return ErrSettleRefused }

// Settler settles keys by hand: what an operator does for a key whose
// call's outcome was learnt elsewhere (the other side's records).
type Settler interface {
	// Settle records s for key, which must be in flight (its owner known
	// to be gone) or uncertain, at version (KeyInfo.Version, as Lookup or
	// List gave it): Applied completes it, NotApplied frees it. It
	// returns the key as it is afterwards. A key at another version, or
	// in another state, is left alone: the error is a
	// *SettleRefusedError carrying the key as found. The owner's token no
	// longer owns a settled key (ErrToken).
	Settle(ctx context.Context, key, version string, s Settlement) (KeyInfo, error)
	// Reap deletes at most limit records whose time has passed (they
	// already read as free; reaping only gives their room back) and
	// returns how many it deleted. A zero or negative limit means the
	// ledger's own bound.
	Reap(ctx context.Context, limit int) (int, error)
}

// CheckQuery returns an error wrapping retryfuse.ErrInvalidPolicy when q
// is not a valid Query, and q with its defaults filled in. Ledgers of
// other stores call it first in List.
func CheckQuery(q Query) (Query, error) {
	switch {
	case q.State > StateCompleted:
		return q, invalidf("Query.State", "unknown state %d", uint8(q.State))
	case q.MinAge < 0:
		return q, invalidf("Query.MinAge", "must not be negative")
	case q.Limit < 0 || q.Limit > MaxListLimit:
		return q, invalidf("Query.Limit", "must be 0 to %d", MaxListLimit)
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	return q, nil
}

// Matches reports whether k is selected by q's State and MinAge.
func (q Query) Matches(k KeyInfo) bool {
	if k.State == StateFree || q.State != StateFree && k.State != q.State {
		return false
	}
	return k.Age() >= q.MinAge
}

// CheckSettlement returns an error wrapping retryfuse.ErrInvalidPolicy
// when s is not a valid Settlement.
func CheckSettlement(s Settlement) error {
	switch {
	case s.Outcome != Applied && s.Outcome != NotApplied:
		return invalidf("Settlement.Outcome", "must be Applied or NotApplied")
	case s.Outcome == NotApplied && s.Stored != nil:
		return invalidf("Settlement.Stored", "must be nil with NotApplied")
	}
	return nil
}
