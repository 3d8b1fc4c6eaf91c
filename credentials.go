package retryfuse

import (
	"github.com/retryfuse/retryfuse/internal/fingerprint"
)

// This file is the credentials a request carries, one definition for both
// halves of the key: the client's Ledger (KeyPolicy.Credentials) and the
// server's middleware (package idempotency, Config.Credentials).

// Credentials names the credentials a request carries: what a repeat under
// an idempotency key must carry too to be answered with the stored
// response of the request that first used the key. A keyed hash of them
// (HMAC-SHA-256) is bound into the fingerprint the key is stored with, so
// that a request that carries other credentials (another principal; or
// the same one whose token was refreshed or key rotated since) meets a
// conflict: it is refused, never given the other's response, and nothing
// is run or sent for it under the key. A request that carries none of
// them keeps the fingerprint it had before credentials were bound.
//
// Only that digest is stored (in memory, Redis or SQL), folded into the
// fingerprint with the request; never the credentials themselves, nor a
// hash of them alone. Hooks and logs never see either.
//
// The zero value names the Authorization header field, hashed under a
// public key. Concurrent identical reads (ReadPolicy) never share a call
// across credentials under the default ShareKey, which keys on every
// header these name.
//
// The Transport sees the request as it reaches it: credentials that a
// Base adds below it (an oauth2.Transport set as Base) are not seen, nor
// bound. Set such a Transport above retryfuse's, or name a header the
// request carries that tells principals apart; a client may also keep
// principals' keys apart by its scope (ScopePolicy.Of), which prefixes
// every key at the Ledger.
type Credentials struct {
	// Headers are the request header fields that carry credentials, each
	// value hashed in order. Nil means Authorization. An empty, non-nil
	// slice names none: with no Cookies either, credentials are not bound
	// (the behaviour before they were). Name every header that tells one
	// principal from another on a shared credential: a payments platform
	// acting for its merchants under one API key names the merchant's
	// header too ([]string{"Authorization", "Stripe-Account"}). A header
	// whose value changes on every honest repeat (a request signature
	// over the time, AWS SigV4's Authorization) must not be named: each
	// repeat would be refused.
	Headers []string

	// Cookies are the names of the cookies (in the Cookie header field)
	// that carry credentials, a session cookie: their values are hashed.
	// Nil means none; the Cookie field as a whole is never hashed, for
	// other cookies come and go.
	Cookies []string

	// Key is the secret key of the hash, at least 16 bytes (32 random
	// bytes advised), the same for every process that shares a Ledger.
	// Nil means a public key: the digest then hides a credential of high
	// entropy (a bearer token, an API key) as well as any hash does, but a
	// guessable one (a Basic password) could be found by someone holding
	// both the Ledger and the request; set a Key where credentials are
	// guessable or the Ledger less guarded than they are. Changing it
	// changes every bound fingerprint: list the key it replaces in
	// PreviousKeys until the Ledger's TTL has passed.
	Key []byte

	// PreviousKeys are keys that Key replaced: a repeat whose fingerprint
	// under Key meets a conflict is looked up again under each of them, so
	// that a key stored before the change keeps its answers. Drop one
	// once the Ledger's TTL has passed since it was replaced. Each holds
	// at least 16 bytes.
	PreviousKeys [][]byte
}

// binding returns the rule of c (nil when it names nothing), or an error
// wrapping ErrInvalidPolicy that names field.
func (c Credentials) binding(field string) (*fingerprint.Credentials, error) {
	headers := c.Headers
	if headers == nil {
		headers = []string{"Authorization"}
	}
	return fingerprint.NewCredentials(field, headers, c.Cookies, c.Key, c.PreviousKeys)
}

// set reports whether any field of c is set.
func (c Credentials) set() bool {
	return c.Headers != nil || c.Cookies != nil || c.Key != nil || c.PreviousKeys != nil
}
