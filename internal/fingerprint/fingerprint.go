// Package fingerprint computes the fingerprint of a request that an
// idempotency key is stored with: the SHA-256 digest of a domain prefix,
// the method, the escaped URL path and, when there is one, the raw query
// (each preceded by its length, a 64-bit big-endian integer), then the
// body. A request without a query has the fingerprint it had before the
// query was included (RequestPrefix); one with a query has a prefix of
// its own (QueryRequestPrefix), so that no request with a query shares a
// fingerprint with one without.
//
// Both halves of the key compute it here, so that they agree byte for
// byte: the client (retryfuse's Transport, which reads the body through
// GetBody: Request) and the server (the idempotency middleware, which has
// the body in a buffer: Of). The value is stored by ledgers that outlive a
// release: it must never change (TestOfFormat and
// TestFingerprintRequestFormat pin it).
package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"io"
	"math"
	"sync"
)

// RequestPrefix separates the domain of request fingerprints, so that
// future versions never equal these.
const RequestPrefix = "retryfuse fingerprint v1 request\x00"

// QueryRequestPrefix starts the fingerprint of a request with a query.
const QueryRequestPrefix = "retryfuse fingerprint v1 request with query\x00"

// ErrTooLong is returned by Hasher.Body for a body longer than its limit.
var ErrTooLong = errors.New("fingerprint: body longer than the limit")

// Hasher is the state of one fingerprint: the hash, a buffer to copy a
// body through, and the reader that bounds the body. Get one with New (or
// Get, from a pool), write the request's parts (Start, then Body or
// Write), read Sum; Reset makes it ready for another. It is not safe for
// concurrent use.
type Hasher struct {
	h   hash.Hash
	buf []byte
	lr  io.LimitedReader
	out [32]byte
}

// New returns a Hasher with a copy buffer of 16 KiB.
func New() *Hasher {
	return &Hasher{h: sha256.New(), buf: make([]byte, 16<<10)}
}

var pool = sync.Pool{New: func() any { return New() }}

// Get returns a Hasher from a pool; Put gives it back.
func Get() *Hasher { return pool.Get().(*Hasher) }

// Put resets h and gives it back to the pool of Get. h must not be used
// afterwards.
func Put(h *Hasher) {
	h.Reset()
	pool.Put(h)
}

// Reset makes h ready for another fingerprint.
func (h *Hasher) Reset() {
	h.h.Reset()
	h.lr = io.LimitedReader{}
}

// Write adds p to the hash; it never fails.
func (h *Hasher) Write(p []byte) (int, error) { return h.h.Write(p) }

// Start writes the start of a request's fingerprint: RequestPrefix, the
// method and the escaped URL path ("/" when empty), each preceded by its
// length; with a raw query (the URL's RawQuery, as sent), QueryRequestPrefix
// instead, and the query after the path, preceded by its length. The body
// follows, written with Write or Body.
func (h *Hasher) Start(method, escapedPath, rawQuery string) {
	if escapedPath == "" {
		escapedPath = "/"
	}
	prefix := RequestPrefix
	if rawQuery != "" {
		prefix = QueryRequestPrefix
	}
	b := append(h.buf[:0], prefix...) // a long path may outgrow buf: b is then a slice of its own
	b = appendField(b, method)
	b = appendField(b, escapedPath)
	if rawQuery != "" {
		b = appendField(b, rawQuery)
	}
	h.h.Write(b)
}

// appendField appends s to b, preceded by its length.
func appendField(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint64(b, uint64(len(s))), s...)
}

// Body writes at most limit bytes read from r into the hash. A
// *bytes.Reader is hashed where it lies, without a copy; any other reader
// is copied through h's buffer. A body longer than limit gives ErrTooLong
// (what was read of it is in the hash: the fingerprint is then of no
// use); an error from reading is returned as it is. limit must not be
// negative.
func (h *Hasher) Body(r io.Reader, limit int64) error {
	if br, ok := r.(*bytes.Reader); ok {
		if int64(br.Len()) > limit {
			return ErrTooLong
		}
		_, _ = br.WriteTo(h.h) // a hash's Write never fails
		return nil
	}
	readMax := limit
	if readMax < math.MaxInt64 {
		readMax++ // one byte more tells a body of exactly limit bytes from a longer one
	}
	h.lr = io.LimitedReader{R: r, N: readMax}
	n, err := io.CopyBuffer(h.h, &h.lr, h.buf)
	if err != nil {
		return err
	}
	if n > limit {
		return ErrTooLong
	}
	return nil
}

// Sum returns the fingerprint of what was written.
func (h *Hasher) Sum() [32]byte {
	h.h.Sum(h.out[:0])
	return h.out
}

// Of returns the fingerprint of a request whose body is in memory: its
// method, escaped URL path ("/" when empty), raw query and body.
func Of(method, escapedPath, rawQuery string, body []byte) [32]byte {
	h := Get()
	h.Start(method, escapedPath, rawQuery)
	h.h.Write(body)
	sum := h.Sum()
	Put(h)
	return sum
}
