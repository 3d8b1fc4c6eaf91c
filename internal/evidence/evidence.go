// Package evidence reads what one attempt's response or error shows about
// the dependency: whether its status is worth another attempt, whether its
// error is known to be transient, and what the server's retry hints say.
// It reads typed evidence (errors.Is and errors.As on errnos, net.Error,
// DNS, TLS and x509 errors, the shape of an HTTP/2 stream reset; the status
// code; the hint headers), never an error's text, with one exception
// documented at serverClosedIdle. The transport's own errors (its timer,
// its refusals) are not its to judge: the root package judges them before
// it asks here.
package evidence

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
)

// serverHintHeaders are the headers by which a server says whether a
// response may be retried: "true" or "false".
var serverHintHeaders = [...]string{"X-Should-Retry", "Stripe-Should-Retry"}

// ServerHints reports whether a retry hint of h says "true" (yes) and
// whether one says "false" (no).
func ServerHints(h http.Header) (yes, no bool) {
	for _, name := range serverHintHeaders {
		if v := h[name]; len(v) > 0 {
			switch hint := strings.TrimSpace(v[0]); {
			case strings.EqualFold(hint, "true"):
				yes = true
			case strings.EqualFold(hint, "false"):
				no = true
			}
		}
	}
	return yes, no
}

// RetryableStatus reports whether code is retryable by default: 408, 425,
// 429, 500, 502, 503 or 504.
func RetryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// Transient reports whether err is known to be transient: connection
// refused, reset or aborted, a broken pipe, EOF (net/http's "server closed
// idle connection" included), an HTTP/2 stream reset with INTERNAL_ERROR or
// REFUSED_STREAM, a timeout (net.Error.Timeout), an unreachable host or
// network, a temporary DNS failure. A cancellation and a certificate or TLS
// verification failure are not, whatever else the chain holds. Anything
// not recognised is not: the transport repeats only what it understands.
func Transient(err error) bool {
	if errors.Is(err, context.Canceled) || certificateError(err) {
		return false
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsTimeout || dnsErr.IsTemporary
	}
	for _, e := range transientErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || serverClosedIdle(err) {
		return true
	}
	if streamReset(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errServerClosedIdleText is the text of net/http's errServerClosedIdle:
// the server's EOF on a reused connection, read before any response. It is
// an EOF like any other, but net/http renames it without wrapping io.EOF and
// does not export it, and returns it (rather than re-sending) for requests
// it does not judge replayable, a PUT or a DELETE among them.
const errServerClosedIdleText = "http: server closed idle connection"

// serverClosedIdle reports whether err, or an error it wraps, is net/http's
// errServerClosedIdle. Its whole text is the only evidence there is; this is
// the one error recognised by its text.
func serverClosedIdle(err error) bool {
	for err != nil {
		if err.Error() == errServerClosedIdleText {
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// h2StreamError has the fields of net/http's (unexported) HTTP/2 stream
// error, in order: that error's As method fills any struct of the same
// shape, which is how it is recognised without its text. It is a target
// for errors.As, never returned.
type h2StreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

// Error makes h2StreamError a target errors.As accepts; it is never
// returned.
func (e h2StreamError) Error() string { return "http2 stream error" }

// HTTP/2 error codes (RFC 9113, section 7) that make a stream reset
// transient.
const (
	h2CodeInternal      = 0x2 // INTERNAL_ERROR: the server gave up on the stream
	h2CodeRefusedStream = 0x7 // REFUSED_STREAM: the server did not process it
)

// streamReset reports whether err, or an error it wraps, is an HTTP/2
// stream reset with INTERNAL_ERROR or REFUSED_STREAM. Other codes (a
// protocol or flow-control error, HTTP_1_1_REQUIRED, ENHANCE_YOUR_CALM)
// are not known to pass.
func streamReset(err error) bool {
	var se h2StreamError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code == h2CodeInternal || se.Code == h2CodeRefusedStream
}

// transientErrnos are the errnos of a connection that failed in a way that
// may pass: refused, reset, aborted, a broken pipe, a timeout, an
// unreachable host or network.
var transientErrnos = [...]error{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
	syscall.EPIPE, syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
}

// certificateError reports whether err is a certificate or TLS
// verification failure, which repeating cannot fix.
func certificateError(err error) bool {
	var (
		verr   *tls.CertificateVerificationError
		unk    x509.UnknownAuthorityError
		inv    x509.CertificateInvalidError
		host   x509.HostnameError
		system x509.SystemRootsError
		alert  tls.AlertError
		rec    tls.RecordHeaderError
	)
	return errors.As(err, &verr) || errors.As(err, &unk) || errors.As(err, &inv) ||
		errors.As(err, &host) || errors.As(err, &system) || errors.As(err, &alert) || errors.As(err, &rec)
}
