package retryfuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/fingerprint"
	"github.com/retryfuse/retryfuse/internal/reqbody"
)

// This file is the ledger of idempotency keys: what it promises (the Ledger
// interface), what it stores (StoredResponse) and how a request's body is
// recognised again (Fingerprint). The in-memory implementation is in
// ledger_memory.go.

// errLedgerFull: the ledger holds its maximum number of keys and every one
// of them is in flight, so none may be evicted. Nothing was sent: the
// Transport returns it wrapped with ErrLedgerUnavailable.
var errLedgerFull = errors.New("retryfuse: idempotency ledger full of keys in flight")

var (
	// ErrLedgerToken: Complete, Release or Uncertain was called with a token
	// that does not own the key (wrong, already used, or the key has since
	// been freed). The call changed nothing.
	ErrLedgerToken = errors.New("retryfuse: ledger token does not own the key")

	// ErrFingerprintLimit: with a Ledger, a request's body is longer than
	// Transport.MaxFingerprintBytes, so it cannot be recognised again;
	// nothing was sent.
	ErrFingerprintLimit = errors.New("retryfuse: body longer than the fingerprint limit")
)

// Fingerprint identifies what was sent under an idempotency key: a SHA-256
// digest. Two requests under the same key with different fingerprints are a
// conflict (decision rule 1).
//
// The Transport fingerprints the method, the escaped URL path, the raw
// query (as sent) and the body. Method, path and query are included
// because a key reused for another operation (POST /refunds under the key
// of POST /charges, or POST /transfer?to=bob under the key of
// POST /transfer?to=alice) must not be answered with the other
// operation's stored result. The host and the headers are left out: they
// often carry per-attempt values (signatures, timestamps, trace ids) that
// would make an honest repeat look like a conflict. To keep the keys of
// different servers apart, prefix the ledger key with the host.
type Fingerprint [32]byte

// fingerprintRequest returns the fingerprint of req's method, escaped URL
// path ("/" when empty), raw query and body, reading the body through req.GetBody (at
// most limit bytes) so that req.Body is never consumed. A request without a
// body (Body nil or http.NoBody) has an empty body. A body without GetBody
// gives an error wrapping ErrNotRepeatable, a request without a URL an
// error. A body longer than limit gives an error wrapping
// ErrFingerprintLimit; an error from GetBody or from reading is returned
// wrapped. A negative limit is an error wrapping ErrInvalidPolicy.
//
// The hashing is internal/fingerprint's, shared with the server's
// middleware (package idempotency), so that both halves agree.
func fingerprintRequest(req *http.Request, limit int64) (Fingerprint, error) {
	if req.URL == nil {
		return Fingerprint{}, errNilURL
	}
	getBody := req.GetBody
	if getBody == nil && (req.Body == nil || req.Body == http.NoBody) {
		getBody = noBody
	}
	f := fingerprinters.Get().(*fingerprinter)
	defer f.put()
	origin := redirectOrigin(req).URL
	f.h.Start(req.Method, origin.EscapedPath(), origin.RawQuery)
	if err := f.hashBody(getBody, limit); err != nil {
		return Fingerprint{}, err
	}
	return f.sum(), nil
}

var errNilURL = errors.New("retryfuse: fingerprint: request has no URL")

// redirectOrigin returns the request that began req's chain of redirects:
// req itself unless http.Client made it to follow a redirect (it then sets
// Response to the redirect). A 307 or 308 sends the same method and body
// to the new location: the same operation, which keeps the fingerprint of
// the path it was first sent to.
func redirectOrigin(req *http.Request) *http.Request {
	for req.Response != nil && req.Response.Request != nil && req.Response.Request.URL != nil {
		req = req.Response.Request
	}
	return req
}

// followsRedirect reports whether resp is a redirect that http.Client
// follows with the same method and body (307, 308 with a Location): not a
// result, but a pointer to where the operation is to be sent.
func followsRedirect(resp *http.Response) bool {
	return (resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect) &&
		resp.Header.Get("Location") != ""
}

// fingerprinter is the state of one fingerprint (internal/fingerprint's
// Hasher: the hash, a buffer to copy the body through, and the reader that
// bounds the body). It is pooled, so that a fingerprint allocates nothing
// of its own.
type fingerprinter struct {
	h *fingerprint.Hasher
}

var fingerprinters = sync.Pool{New: func() any {
	return &fingerprinter{h: fingerprint.New()}
}}

// put resets f and gives it back to the pool.
func (f *fingerprinter) put() {
	f.h.Reset()
	fingerprinters.Put(f)
}

// sum returns the fingerprint of what was written.
func (f *fingerprinter) sum() Fingerprint { return f.h.Sum() }

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// hashBody writes at most limit bytes of the body into f's hash and closes
// it.
func (f *fingerprinter) hashBody(getBody func() (io.ReadCloser, error), limit int64) error {
	if limit < 0 {
		return invalidPolicy("fingerprint limit", "must not be negative")
	}
	if getBody == nil {
		return fmt.Errorf("%w: no GetBody: the body cannot be read again to fingerprint it", ErrNotRepeatable)
	}
	rc, err := getBody()
	if err != nil {
		return fmt.Errorf("retryfuse: fingerprint: get body: %w", err)
	}
	if rc == nil {
		return nil // GetBody gave no reader: an empty body
	}
	defer rc.Close()
	var body io.Reader = rc
	if r, ok := reqbody.InMemory(rc).(*bytes.Reader); ok {
		body = r // hashed where it lies, without a copy through the buffer
	}
	switch err := f.h.Body(body, limit); {
	case errors.Is(err, fingerprint.ErrTooLong):
		return fmt.Errorf("%w (%d bytes)", ErrFingerprintLimit, limit)
	case err != nil:
		return fmt.Errorf("retryfuse: fingerprint: read body: %w", err)
	}
	return nil
}

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

// LedgerClaim is the answer of Ledger.Begin.
type LedgerClaim struct {
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
// and returns an error wrapping ErrLedgerToken.
type Ledger interface {
	// Begin looks key up. A fingerprint other than the one stored for the key
	// gives KeyConflict whatever the key's state; a free key is claimed for
	// the caller (KeyNone with a Token).
	Begin(ctx context.Context, key string, fp Fingerprint) (LedgerClaim, error)
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
