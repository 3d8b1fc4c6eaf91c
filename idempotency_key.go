package retryfuse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/retryfuse/retryfuse/decide"
)

// This file is the facts about a request that its call reads first: the
// method, the idempotency key (from its header or its context, or
// generated), and whether its body can be replayed.

// maxIdempotencyKeyLen is the longest idempotency key the transport sends.
const maxIdempotencyKeyLen = 255

// The header names under which a request may carry its idempotency key.
// headerIdempotencyKey is the IETF draft's name; headerXIdempotencyKey is
// the older form net/http also recognises.
const (
	headerIdempotencyKey  = "Idempotency-Key"
	headerXIdempotencyKey = "X-Idempotency-Key"
)

// Non-canonical map keys under which the transport carries a key for a
// method that is not idempotent. Servers match header names without regard
// to case, so the key reaches them unchanged; but net/http's Transport only
// recognises the canonical map keys when it decides to re-send a request on
// its own after a failure on a reused connection. Hiding the key from it
// keeps retryfuse the only layer that repeats a write. The cost: a
// RoundTripper below this one that reads the key with Header.Get does not
// see it; read it with IdempotencyKeyOf.
const (
	hiddenIdempotencyKey  = "idempotency-key"
	hiddenXIdempotencyKey = "x-idempotency-key"
)

// isKeyHeader reports whether a header map key names the idempotency key:
// Idempotency-Key or X-Idempotency-Key, spelt in any case. Servers match
// header names without regard to case, and net/http writes a map key as it
// is, so every spelling reaches the server as the key.
func isKeyHeader(name string) bool {
	switch len(name) {
	case len(headerIdempotencyKey):
		return strings.EqualFold(name, headerIdempotencyKey)
	case len(headerXIdempotencyKey):
		return strings.EqualFold(name, headerXIdempotencyKey)
	}
	return false
}

// IdempotencyKeyOf returns the idempotency key h carries, under any
// spelling of Idempotency-Key or X-Idempotency-Key (the Transport's own,
// hidden form included), and whether one is present. An empty value counts
// as no key, as it does for the Transport.
func IdempotencyKeyOf(h http.Header) (string, bool) {
	for name, v := range h {
		if len(v) > 0 && v[0] != "" && isKeyHeader(name) {
			return v[0], true
		}
	}
	return "", false
}

// requestKey is what the transport knows of a request's idempotency key.
type requestKey struct {
	value     string
	present   bool // a non-empty key is carried (or was generated)
	generated bool // the transport generated it
	added     bool // the transport adds it to the request (generated, or from the context)
}

// readKey returns the request's key after validating it, whatever the
// spelling of its header. An empty header value counts as no key. A key
// that cannot be sent safely, or several that disagree, are an error.
func readKey(h http.Header) (requestKey, error) {
	var k requestKey
	for name, v := range h {
		if len(v) == 0 || !isKeyHeader(name) {
			continue
		}
		if len(v) > 1 {
			return k, fmt.Errorf("%w: header %s has %d values, want one", ErrInvalidIdempotencyKey, name, len(v))
		}
		if v[0] == "" {
			continue
		}
		if k.present && v[0] != k.value {
			return k, fmt.Errorf("%w: %s and another idempotency key header disagree", ErrInvalidIdempotencyKey, name)
		}
		if err := validateIdempotencyKey(v[0]); err != nil {
			return k, err
		}
		k.value, k.present = v[0], true
	}
	return k, nil
}

// validateIdempotencyKey reports whether key can be sent safely as a header
// value: 1 to maxIdempotencyKeyLen bytes of visible ASCII or inner spaces.
// Control characters (CR and LF above all, which would inject header lines),
// non-ASCII bytes and surrounding spaces are refused. The error wraps
// ErrInvalidIdempotencyKey.
func validateIdempotencyKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidIdempotencyKey)
	case len(key) > maxIdempotencyKeyLen:
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalidIdempotencyKey, len(key), maxIdempotencyKeyLen)
	case key[0] == ' ' || key[len(key)-1] == ' ':
		return fmt.Errorf("%w: leading or trailing space", ErrInvalidIdempotencyKey)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: byte %#x at offset %d is not visible ASCII", ErrInvalidIdempotencyKey, c, i)
		}
	}
	return nil
}

// newIdempotencyKey returns 128 bits from crypto/rand as 32 hex digits.
func newIdempotencyKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("retryfuse: generating an idempotency key: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// replayableBody reports whether req's body can be sent again byte for
// byte: no body, or a GetBody to obtain a fresh copy.
func replayableBody(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// needsKeyHiding reports whether h carries a key under a canonical map key
// that net/http's Transport would take as licence to re-send a request of a
// method that is not idempotent.
func needsKeyHiding(method string, h http.Header) bool {
	if decide.IdempotentMethod(method) {
		return false
	}
	_, a := h[headerIdempotencyKey]
	_, b := h[headerXIdempotencyKey]
	return a || b
}

// hideKey returns a copy of h whose idempotency key, if any, sits under the
// non-canonical map keys, and sets key there when it is not empty (a
// generated key). h itself is never modified.
//
// The copy is of the map alone: its value slices are h's, so that hiding
// a key costs one map, not a copy of every value. They are shared only to
// be read: nothing in this package writes to a request's header, and
// net/http's Transport only reads it (a RoundTripper must not modify the
// request). Each is cut to its length, so that Add or append on the copy
// (by a base that breaks that rule) makes a new slice rather than write
// into h's; Set and Del replace or remove the copy's own map entries.
func hideKey(h http.Header, key string) http.Header {
	h2 := make(http.Header, len(h)+1)
	for name, v := range h {
		h2[name] = v[:len(v):len(v)]
	}
	if v, ok := h2[headerIdempotencyKey]; ok {
		delete(h2, headerIdempotencyKey)
		h2[hiddenIdempotencyKey] = v
	}
	if v, ok := h2[headerXIdempotencyKey]; ok {
		delete(h2, headerXIdempotencyKey)
		h2[hiddenXIdempotencyKey] = v
	}
	if key != "" {
		h2[hiddenIdempotencyKey] = []string{key}
	}
	return h2
}

// contextKey is the context key of WithIdempotencyKey.
type contextKey struct{}

// contextIdempotencyKey returns the key WithIdempotencyKey put in ctx.
func contextIdempotencyKey(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(contextKey{}).(string)
	return k, ok
}

// readFacts reads the method, the idempotency key (from the header, else
// from the context, else generated when so configured) and whether the
// body can be replayed.
func (c *call) readFacts() error {
	req := c.req
	c.method = req.Method
	if c.method == "" {
		c.method = http.MethodGet
	}
	key, err := readKey(req.Header)
	if err != nil {
		return err
	}
	if !key.present {
		if v, ok := contextIdempotencyKey(req.Context()); ok {
			if err := validateIdempotencyKey(v); err != nil {
				return err
			}
			key = requestKey{value: v, present: true, added: true}
		} else if c.p.generateKeys && (c.method == http.MethodPost || c.method == http.MethodPatch) {
			v, err := newIdempotencyKey()
			if err != nil {
				return err
			}
			key = requestKey{value: v, present: true, generated: true, added: true}
		}
	}
	c.key = key
	if key.added || needsKeyHiding(c.method, req.Header) {
		add := ""
		if key.added {
			add = key.value
		}
		c.header = hideKey(req.Header, add)
	}
	c.facts = decide.Request{Method: c.method, IdempotencyKey: c.key.present, ReplayableBody: replayableBody(req)}
	c.ctx = req.Context()
	return nil
}

// WithIdempotencyKey returns a copy of ctx that carries key as the
// idempotency key of the logical operation a request belongs to. A request
// sent with it that carries no Idempotency-Key header of its own is sent
// with this key, as if it carried it: it may be repeated, and a Ledger knows
// it. An outer retry layer that sends the request again with the same
// context sends the same key, so that the server applies the operation
// once. An invalid key makes RoundTrip return an error wrapping
// ErrInvalidIdempotencyKey, as a header would.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, contextKey{}, key)
}
