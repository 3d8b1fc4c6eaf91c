// Package stored holds the bounds of a response stored under an
// idempotency key, shared by every ledger (ledger.Memory, the
// Redis ledger) and by the server middleware (package idempotency), so
// that each draws the line at the same place: a response whose header is
// larger is not stored, and its key is completed without a result to
// replay.
package stored

import "net/http"

// The bounds of a stored response's header: its values, each counted as
// a field, and the bytes of its names and values.
const (
	MaxHeaderFields = 100
	MaxHeaderBytes  = 32 << 10
)

// HeaderFits reports whether h is within MaxHeaderFields and
// MaxHeaderBytes.
func HeaderFits(h http.Header) bool {
	fields, size := 0, 0
	for name, values := range h {
		for _, v := range values {
			fields++
			size += len(name) + len(v)
		}
		if fields > MaxHeaderFields || size > MaxHeaderBytes {
			return false
		}
	}
	return true
}
