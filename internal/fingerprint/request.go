package fingerprint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/retryfuse/retryfuse/internal/reqbody"
	"github.com/retryfuse/retryfuse/internal/sentinel"
)

// This file is the fingerprint of an *http.Request as the client half
// sends it: the body read through GetBody, and the redirects that keep the
// operation's.

// ErrNilURL is returned by Request for a request without a URL: the
// caller's mistake, which the root package tells from a failure (a
// Fallback must not hide it). Its users do not see it by name.
var ErrNilURL = errors.New("retryfuse: fingerprint: request has no URL")

// Request returns the fingerprint of req's method, escaped URL path ("/"
// when empty), raw query and body, reading the body through req.GetBody
// (at most limit bytes) so that req.Body is never consumed. A request
// without a body (Body nil or http.NoBody) has an empty body. The path and
// query are those of the request that began req's chain of redirects
// (RedirectOrigin).
//
// A body without GetBody gives an error wrapping sentinel.ErrNotRepeatable,
// a request without a URL ErrNilURL. A body longer than limit gives an
// error wrapping sentinel.ErrFingerprintLimit; an error from GetBody or
// from reading is returned wrapped. A negative limit is an error wrapping
// sentinel.ErrInvalidPolicy.
//
// A body in memory (io.NopCloser of a *bytes.Reader, as http.NewRequest's
// GetBody gives) is hashed where it lies; the Hasher comes from the pool
// of Get: a fingerprint allocates nothing of its own.
func Request(req *http.Request, limit int64) ([32]byte, error) {
	if req.URL == nil {
		return [32]byte{}, ErrNilURL
	}
	getBody := req.GetBody
	if getBody == nil && (req.Body == nil || req.Body == http.NoBody) {
		getBody = noBody
	}
	h := Get()
	defer Put(h)
	origin := RedirectOrigin(req).URL
	h.Start(req.Method, origin.EscapedPath(), origin.RawQuery)
	if err := hashBody(h, getBody, limit); err != nil {
		return [32]byte{}, err
	}
	return h.Sum(), nil
}

// RedirectOrigin returns the request that began req's chain of redirects:
// req itself unless http.Client made it to follow a redirect (it then sets
// Response to the redirect). A 307 or 308 sends the same method and body
// to the new location: the same operation, which keeps the fingerprint of
// the path it was first sent to.
func RedirectOrigin(req *http.Request) *http.Request {
	for req.Response != nil && req.Response.Request != nil && req.Response.Request.URL != nil {
		req = req.Response.Request
	}
	return req
}

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// hashBody writes at most limit bytes of the body into h and closes it.
func hashBody(h *Hasher, getBody func() (io.ReadCloser, error), limit int64) error {
	if limit < 0 {
		return sentinel.InvalidPolicy("fingerprint limit", "must not be negative")
	}
	if getBody == nil {
		return fmt.Errorf("%w: no GetBody: the body cannot be read again to fingerprint it", sentinel.ErrNotRepeatable)
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
	switch err := h.Body(body, limit); {
	case errors.Is(err, ErrTooLong):
		return fmt.Errorf("%w (%d bytes)", sentinel.ErrFingerprintLimit, limit)
	case err != nil:
		return fmt.Errorf("retryfuse: fingerprint: read body: %w", err)
	}
	return nil
}
