package retryfuse

import (
	"strconv"

	"github.com/retryfuse/retryfuse/decide"
)

// This file is the refusal of a key used for another request: by the
// Transport's Ledger before sending, or by a server that honours keys.

// KeyConflictError is the error of a keyed call whose key was used for
// another request: another method, path, query or body, or, at the
// Transport's Ledger, a request that carried other credentials
// (KeyPolicy.Credentials): another principal, or the same one under
// credentials refreshed or rotated since. Nothing was run for it under
// the key, and no response stored under the key was given to it: send it
// under a key of its own (after checking, for a rotated credential, that
// the earlier call under the key is not this very write). It matches
// ErrIdempotencyConflict, and not ErrDeclined: sent again, it meets the
// same refusal.
//
//	var kc *retryfuse.KeyConflictError
//	if errors.As(err, &kc) && kc.Credentials {
//		// the key is held for a request with other credentials
//	}
type KeyConflictError struct {
	Method string // the request's method
	URL    string // the request's URL, without credentials and with the query redacted
	Key    string // the idempotency key
	Scope  string // the key's scope, cut to 128 bytes

	// ByServer: the server refused the key (its 422, "key reused") after
	// the request was sent; false, the Transport's Ledger refused it and
	// nothing was sent.
	ByServer bool

	// Credentials: the credentials requests carry (KeyPolicy.Credentials)
	// are part of what had to match at the Ledger, so that the earlier
	// request under the key may have been another principal's (or carried
	// none, or this one did not), or this principal's under credentials
	// since refreshed or rotated, rather than another payload. Never true
	// with ByServer.
	Credentials bool

	// Attempts is the number of attempts made: 0 when the Ledger refused
	// the call.
	Attempts int
}

func (e *KeyConflictError) Error() string {
	s := "retryfuse: idempotency key used for another request"
	if e.Credentials {
		s += " or under other credentials"
	}
	if e.ByServer {
		s += " (refused by the server)"
	}
	s += ": " + e.Method + " " + e.URL + ", idempotency key " + strconv.Quote(e.Key) + " in scope " + e.Scope
	if e.Attempts > 0 {
		s += " after " + counted(e.Attempts, "attempt")
	}
	return s
}

// Unwrap returns ErrIdempotencyConflict, so that errors.Is matches it.
func (e *KeyConflictError) Unwrap() error { return ErrIdempotencyConflict }

// refuseConflict ends a call whose key was used for another request, as
// the Ledger (verdict v) or the server (byServer) said.
func (c *call) refuseConflict(v decide.Verdict, byServer bool) *KeyConflictError {
	c.giveUp(ErrIdempotencyConflict, v)
	return &KeyConflictError{
		Method: c.method, URL: c.redactedURL(), Key: c.key.value, Scope: boundedScope(c.scopeName()),
		ByServer: byServer, Credentials: c.credsBound && !byServer, Attempts: c.attempt,
	}
}
