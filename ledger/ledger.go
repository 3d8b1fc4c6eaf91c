// Package ledger holds the key ledger of retryfuse: per idempotency key,
// the fingerprint of what was sent under it and the key's state, so that a
// retryfuse.Transport (its KeyPolicy.Ledger) refuses a concurrent
// duplicate, refuses the same key with a different body, and answers a
// completed key with its stored result without sending; the server's
// middleware (package idempotency) keeps its keys on the same contract.
//
// Ledger is the contract, Claim its answer to Begin, StoredResponse the
// result kept for a completed key, Fingerprint what identifies what was
// sent. Memory is the Ledger held in a process's memory; the modules
// github.com/retryfuse/retryfuse/redis and github.com/retryfuse/retryfuse/sql
// keep one shared by a fleet.
//
// An operator reads a key without changing it (Inspector: Lookup, and
// List, a bounded page of keys by state and age) and settles a key whose
// call's outcome was learnt elsewhere (Settler: Settle, a compare-and-set
// on the KeyInfo.Version seen; Reap). Memory and the Ledgers of the redis
// and sql modules implement both; the command "retryfuse keys" drives
// them against Redis or SQL. Package ledgertest is the conformance suite
// every ledger runs, a ledger of your own store included.
//
// Memory follows golang.org/x/time/rate: one mutex, no goroutine; keys
// expire lazily, from the time passed in. Its methods ending in At take
// that time as an argument, as rate.Limiter's AllowN does (a Transport
// runs its Memory on its own clock so); the others read time.Now.
package ledger

import (
	"context"
	"errors"
	"net/http"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/sentinel"
)

var (
	// ErrToken: Complete, Release or Uncertain was called with a token
	// that does not own the key (wrong, already used, or the key has since
	// been freed). The call changed nothing.
	ErrToken = errors.New("retryfuse: ledger token does not own the key")

	// ErrUnavailable: the ledger could not say whether the key is free, so
	// the request was not sent: a key is never treated as free without
	// evidence. A retryfuse.Transport wraps every error of its Ledger's
	// Begin in it (exported there as retryfuse.ErrLedgerUnavailable, the
	// same value), and a Ledger of a shared store (the redis and sql
	// modules) wraps its own failures in it. It matches
	// retryfuse.ErrDeclined.
	ErrUnavailable = sentinel.Declined("retryfuse: idempotency ledger unavailable")
)

// Fingerprint identifies what was sent under an idempotency key: a SHA-256
// digest. Two requests under the same key with different fingerprints are a
// conflict (decision rule 1).
//
// A retryfuse.Transport fingerprints the method, the escaped URL path, the
// raw query (as sent) and the body. Method, path and query are included
// because a key reused for another operation (POST /refunds under the key
// of POST /charges, or POST /transfer?to=bob under the key of
// POST /transfer?to=alice) must not be answered with the other
// operation's stored result. The host and the headers are left out: they
// often carry per-attempt values (signatures, timestamps, trace ids) that
// would make an honest repeat look like a conflict. To keep the keys of
// different servers apart, prefix the ledger key with the host.
//
// The credentials a request carries are the exception
// (retryfuse.Credentials: the Authorization header field by default, on
// the Transport with a Ledger and in the idempotency middleware without a
// Scope). When a request carries any of them, its fingerprint is an
// HMAC-SHA-256, under Credentials.Key, of the digest above and their
// values: a repeat under other credentials is then a conflict, and
// neither the credentials nor a hash of them alone is stored. A request
// that carries none keeps the digest above.
type Fingerprint [32]byte

// StoredResponse is the result stored for a completed key and replayed for a
// later call under it. The ledger keeps and hands out deep copies: changing
// a StoredResponse after Complete, or one returned by Begin, never changes
// what the ledger holds.
type StoredResponse struct {
	StatusCode int
	Header     http.Header
	Body       []byte
}

// clone returns a deep copy of r (nil for nil).
func (r *StoredResponse) clone() *StoredResponse {
	if r == nil {
		return nil
	}
	c := &StoredResponse{StatusCode: r.StatusCode, Header: r.Header.Clone()}
	if r.Body != nil {
		c.Body = append(make([]byte, 0, len(r.Body)), r.Body...)
	}
	return c
}

// Claim is the answer of Ledger.Begin.
type Claim struct {
	// State is the key's state:
	//   - KeyNone: the key was free and the caller now owns it (in flight). It
	//     must end the claim with Complete, Release or Uncertain, using Token.
	//   - KeyInFlight: another call holds the key; see Uncertain.
	//   - KeyCompleted: an earlier call under the key got a confirmed result;
	//     see Stored.
	//   - KeyConflict: the key was used with a different fingerprint, whatever
	//     the key's state.
	State decide.KeyState
	// Uncertain, with KeyInFlight: an earlier call under the key ended with
	// an uncertain outcome, or its claim expired without a recorded result.
	// The key is neither completed nor free until it expires, or until its
	// outcome is learnt (Complete or Release with Token).
	Uncertain bool
	// Stored, with KeyCompleted: a copy of the stored result; nil when there
	// was none or its body was too large to store. The transport then asks
	// the caller to reconcile rather than replay.
	Stored *StoredResponse
	// Token, with KeyNone: the owner's token for Complete, Release and
	// Uncertain. With Uncertain: the token that ends the uncertain claim
	// with Complete or Release once its outcome is known.
	Token string
}

// Ledger remembers, per idempotency key, the fingerprint of what was sent
// and the key's state, so that the transport can refuse a concurrent
// duplicate, refuse the same key with a different body, and answer a
// completed key with its stored result without sending.
//
// Implementations must be safe for concurrent use, and exactly one
// concurrent caller may own a key: of any number of concurrent Begin calls
// on a free key, exactly one gets KeyNone.
//
// A claim expires uncertain, never free: a claim whose owner has not ended
// it within the ledger's in-flight time may have been sent and applied,
// its result never recorded, so the key is then held as after Uncertain
// (for the ledger's TTL), and the owner's token may still end it.
//
// A Complete, Release or Uncertain call whose token does not own the key (a
// wrong token, a claim already ended, or a key since freed) changes nothing
// and returns an error wrapping ErrToken. One exception: a Complete repeated
// by the token that completed the key (the same step sent again after its
// reply was lost, as over a network) may return nil instead; it still
// changes nothing, and the first result stays stored.
type Ledger interface {
	// Begin looks key up. A fingerprint other than the one stored for the key
	// gives KeyConflict whatever the key's state; a free key is claimed for
	// the caller (KeyNone with a Token).
	Begin(ctx context.Context, key string, fp Fingerprint) (Claim, error)
	// Complete ends a claim with a confirmed result. res is stored as a
	// copy; when res is nil or its body is too large, the key is completed
	// without a stored result (Stored nil). It also ends an uncertain claim
	// whose effect is since known to have happened.
	Complete(ctx context.Context, key, token string, res *StoredResponse) error
	// Release ends a claim that took no effect (nothing was sent, or the
	// failure was definite): the key is free again. It also ends an
	// uncertain claim whose effect is since known not to have happened.
	Release(ctx context.Context, key, token string) error
	// Uncertain ends a claim whose outcome is unknown: the key stays held (a
	// later Begin sees KeyInFlight with Uncertain true) until it expires.
	Uncertain(ctx context.Context, key, token string) error
}
