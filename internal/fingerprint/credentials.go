package fingerprint

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/retryfuse/retryfuse/internal/sentinel"
)

// This file is the credentials a request carries, as both halves of the
// key bind them into the fingerprint a key is stored with: a repeat under
// a key matches only when it carries the same credentials, so that one
// principal's stored response is never another's.

// CredentialsPrefix separates the domain of fingerprints bound to
// credentials from every other use of the keyed hash.
const CredentialsPrefix = "retryfuse fingerprint v1 credentials\x00"

// PublicCredentialsKey is the key of the hash when none is given: public,
// the same in every process, so that a fleet sharing a ledger binds
// credentials alike, and a restart changes nothing. Under it the bound
// fingerprint is a domain-separated SHA-256 (HMAC under a known key):
// inverting it needs the request (its body included) and a guess of the
// credentials, which a bearer token or an API key (128 bits and more)
// defeats; a low-entropy secret (a Basic password) wants a secret key.
const PublicCredentialsKey = "retryfuse credentials v1 public key"

// MinCredentialsKey is the shortest secret key accepted, in bytes.
const MinCredentialsKey = 16

// Credentials is the rule that names a request's credentials (header
// fields and cookies) and the keys of the hash that binds them. It is
// safe for concurrent use. A nil *Credentials binds nothing.
type Credentials struct {
	headers []string  // canonical names, in the order given
	cookies []string  // cookie names, in the order given
	keys    []*macKey // the current key first
}

// macKey is a key of the hash and the states of HMAC-SHA-256 under it
// that no Bind is using: a bounded free list rather than a sync.Pool,
// which a collection empties, so that a warm Bind never allocates. A
// Bind that finds none makes one; one returned to a full list is
// dropped.
type macKey struct {
	key  []byte
	last atomic.Pointer[binder] // the one returned last, taken without the channel
	free chan *binder
}

// maxFreeBinders bounds a key's free list: the Binds that run at once
// and then allocate nothing.
const maxFreeBinders = 32

func (k *macKey) get() *binder {
	if b := k.last.Swap(nil); b != nil {
		return b
	}
	select {
	case b := <-k.free:
		return b
	default:
		return &binder{mac: hmac.New(sha256.New, k.key)}
	}
}

func (k *macKey) put(b *binder) {
	b.mac.Reset()
	if k.last.CompareAndSwap(nil, b) {
		return
	}
	select {
	case k.free <- b:
	default:
	}
}

// NewCredentials returns the rule for the header fields and cookies
// named, hashed under key (PublicCredentialsKey when nil), with the
// previous keys whose fingerprints still match (see Bind). field names
// the setting in errors: a name that is not a header or cookie name, or a
// key shorter than MinCredentialsKey, is an error wrapping
// sentinel.ErrInvalidPolicy. With no header and no cookie, it returns nil:
// nothing is bound.
func NewCredentials(field string, headers, cookies []string, key []byte, previous [][]byte) (*Credentials, error) {
	c := &Credentials{}
	for _, name := range headers {
		if !token(name) {
			return nil, sentinel.InvalidPolicy(field+".Headers", strconv.Quote(name)+" is not a header field name")
		}
		c.headers = append(c.headers, http.CanonicalHeaderKey(name))
	}
	for _, name := range cookies {
		if !token(name) {
			return nil, sentinel.InvalidPolicy(field+".Cookies", strconv.Quote(name)+" is not a cookie name")
		}
		c.cookies = append(c.cookies, name)
	}
	if key != nil && len(key) < MinCredentialsKey {
		return nil, sentinel.InvalidPolicy(field+".Key", "must hold at least "+strconv.Itoa(MinCredentialsKey)+" bytes")
	}
	for _, k := range previous {
		if len(k) < MinCredentialsKey {
			return nil, sentinel.InvalidPolicy(field+".PreviousKeys", "must each hold at least "+strconv.Itoa(MinCredentialsKey)+" bytes")
		}
	}
	if len(c.headers) == 0 && len(c.cookies) == 0 {
		return nil, nil
	}
	if key == nil {
		key = []byte(PublicCredentialsKey)
	}
	for _, k := range append([][]byte{key}, previous...) {
		// A copy: the caller's slice may change.
		c.keys = append(c.keys, &macKey{key: c.derive(k), free: make(chan *binder, maxFreeBinders)})
	}
	return c, nil
}

// token reports whether s is an RFC 9110 token: the form of a header
// field name, and of a cookie name (RFC 6265).
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// derive returns the key of c's hash under key: HMAC-SHA-256 under key of
// CredentialsPrefix and the names c binds (each header field's canonical
// name, then each cookie's, each preceded by its length, the two lists
// by their numbers), so that the domain and the rule are in the key and
// each Bind hashes the values alone.
func (c *Credentials) derive(key []byte) []byte {
	b := binary.AppendUvarint([]byte(CredentialsPrefix), uint64(len(c.headers)))
	for _, name := range c.headers {
		b = appendUvarintField(b, name)
	}
	b = binary.AppendUvarint(b, uint64(len(c.cookies)))
	for _, name := range c.cookies {
		b = appendUvarintField(b, name)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	return mac.Sum(nil)
}

// appendUvarintField appends s to b, preceded by its length as a uvarint.
func appendUvarintField(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// Keys returns the number of keys a fingerprint may be bound under: the
// current one and the previous ones. Zero for a nil c.
func (c *Credentials) Keys() int {
	if c == nil {
		return 0
	}
	return len(c.keys)
}

// Carried reports whether h carries any of the credentials c names: a
// named header field, or a named cookie in a Cookie field.
func (c *Credentials) Carried(h http.Header) bool {
	if c == nil {
		return false
	}
	for _, name := range c.headers {
		if _, ok := h[name]; ok {
			return true
		}
	}
	for _, name := range c.cookies {
		if countCookies(h, name) > 0 {
			return true
		}
	}
	return false
}

// binder is the state of one Bind, kept in its key's free list: the keyed
// hash and the buffers its input and output are written to.
type binder struct {
	mac hash.Hash
	buf [512]byte
	out [32]byte
}

// Bind returns fp bound to the credentials h carries, under the key i
// (0, the current key; then the previous ones, as given): HMAC-SHA-256,
// under the key derived for c (see derive), of fp, then of each named
// header field its number of values and each value, then of each named
// cookie the number of its occurrences and each value, every value
// preceded by its length (uvarints). A request that carries none of them
// keeps fp as it is: the fingerprint it had before credentials were
// bound, which no bound one equals. Only this digest is ever stored; the
// credentials are not.
func (c *Credentials) Bind(fp [32]byte, h http.Header, i int) [32]byte {
	if !c.Carried(h) {
		return fp
	}
	k := c.keys[i]
	st := k.get()
	b := append(st.buf[:0], fp[:]...)
	for _, name := range c.headers {
		vs := h[name]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendUvarintField(b, v)
		}
	}
	for _, name := range c.cookies {
		b = binary.AppendUvarint(b, uint64(countCookies(h, name)))
		for _, line := range h["Cookie"] {
			for v, rest, ok := nextCookie(line, name); ok; v, rest, ok = nextCookie(rest, name) {
				b = appendUvarintField(b, v)
			}
		}
	}
	st.mac.Write(b)
	out := [32]byte(st.mac.Sum(st.out[:0]))
	k.put(st)
	return out
}

// countCookies returns the number of cookies called name in h's Cookie
// fields.
func countCookies(h http.Header, name string) int {
	n := 0
	for _, line := range h["Cookie"] {
		for _, rest, ok := nextCookie(line, name); ok; _, rest, ok = nextCookie(rest, name) {
			n++
		}
	}
	return n
}

// nextCookie returns the value of the first cookie called name in line (a
// Cookie field's value, or what is left of it) and the rest of the line
// after it: pairs split at ";", spaces trimmed, the name matched exactly,
// a quoted value unquoted. Whatever the bytes, it reads them the same way
// every time: the binding needs no more.
func nextCookie(line, name string) (value, rest string, ok bool) {
	for line != "" {
		var part string
		part, line, _ = strings.Cut(line, ";")
		k, v, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found || k != name {
			continue
		}
		if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		return v, line, true
	}
	return "", "", false
}
