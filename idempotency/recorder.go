package idempotency

import (
	"bufio"
	"net"
	"net/http"
	"strings"

	"github.com/retryfuse/retryfuse/internal/stored"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is the ResponseWriter the handler of a claimed key writes to:
// it passes everything through and keeps what the response was, to store
// it under the key.

// recorder passes a handler's response through to w and keeps a copy of
// it: the first final status, the header as it was sent, and up to max
// bytes of body. It keeps what the handler wrote even when w fails (the
// client has gone): the handler's outcome decides what is stored.
//
// Flush passes through (http.Flusher, and FlushError for
// http.ResponseController), so do Hijack and, through Unwrap, the rest of
// http.ResponseController's methods.
type recorder struct {
	w        http.ResponseWriter
	status   int         // the first final status written; 0 before
	header   http.Header // a copy of the header as it was when status was written
	body     []byte
	max      int64
	stored   *ledger.StoredResponse // where result puts the response
	over     bool                   // the body outgrew max: it is not kept
	hijacked bool
	released bool     // the handler called Release: the key is freed, nothing stored
	unstored []string // the header fields never stored (Set-Cookie, Config.UnstoredHeaders)
}

func (rec *recorder) Header() http.Header { return rec.w.Header() }

// Unwrap returns the ResponseWriter underneath, for http.ResponseController.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }

// WriteHeader records the first final status (a 1xx but 101 is not final,
// as for net/http) and the header with it; a later one is passed through,
// and net/http ignores it.
func (rec *recorder) WriteHeader(code int) {
	if rec.status == 0 && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		rec.commit(code)
	}
	rec.w.WriteHeader(code)
}

// commit records status and a copy of the header: what the client is sent.
func (rec *recorder) commit(status int) {
	rec.status = status
	rec.header = rec.w.Header().Clone()
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.commit(http.StatusOK)
	}
	if !rec.over {
		if int64(len(rec.body)+len(p)) > rec.max {
			rec.over = true
			rec.body = nil
		} else {
			rec.body = append(rec.body, p...)
		}
	}
	return rec.w.Write(p)
}

// Flush implements http.Flusher.
func (rec *recorder) Flush() { _ = rec.FlushError() }

// FlushError flushes, and is what http.ResponseController.Flush calls. A
// flush sends the header: the status is then 200 unless written.
func (rec *recorder) FlushError() error {
	if rec.status == 0 {
		rec.commit(http.StatusOK)
	}
	return http.NewResponseController(rec.w).Flush()
}

// Hijack implements http.Hijacker when w does. What a handler writes to a
// connection it took over is not seen: the key is completed without a
// stored response.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(rec.w).Hijack()
	if err == nil {
		rec.hijacked = true
	}
	return c, rw, err
}

// result returns the response to store once the handler has returned, or
// nil when there is none to replay: its body outgrew max, it declares
// trailers (which are not stored), its header is beyond the bounds of a
// stored response, or the connection was taken over.
func (rec *recorder) result() *ledger.StoredResponse {
	if rec.status == 0 {
		rec.commit(http.StatusOK) // nothing written: net/http sends 200 with the header as it is
	}
	if rec.over || rec.hijacked || hasTrailers(rec.w.Header()) || !stored.HeaderFits(rec.header) {
		return nil
	}
	*rec.stored = ledger.StoredResponse{StatusCode: rec.status, Header: without(rec.header, rec.unstored), Body: rec.body}
	return rec.stored
}

// hasTrailers reports whether h declares trailers, or holds one set after
// the header was written (http.TrailerPrefix).
func hasTrailers(h http.Header) bool {
	if _, ok := h["Trailer"]; ok {
		return true
	}
	for name := range h {
		if strings.HasPrefix(name, http.TrailerPrefix) {
			return true
		}
	}
	return false
}
