package retryfuse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/retryfuse/retryfuse/internal/fingerprint"
	"github.com/retryfuse/retryfuse/internal/reqbody"
	"github.com/retryfuse/retryfuse/internal/sentinel"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is how a request is recognised again under its key: its
// fingerprint for the ledger (ledger.Fingerprint), and the redirects that
// keep the operation's.

// ErrFingerprintLimit: with a Ledger, a request's body is longer than
// Keys.MaxFingerprintBytes, so it cannot be recognised again; nothing was
// sent.
var ErrFingerprintLimit = sentinel.ErrFingerprintLimit

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
func fingerprintRequest(req *http.Request, limit int64) (ledger.Fingerprint, error) {
	if req.URL == nil {
		return ledger.Fingerprint{}, errNilURL
	}
	getBody := req.GetBody
	if getBody == nil && (req.Body == nil || req.Body == http.NoBody) {
		getBody = noBody
	}
	h := fingerprint.Get()
	defer fingerprint.Put(h)
	origin := redirectOrigin(req).URL
	h.Start(req.Method, origin.EscapedPath(), origin.RawQuery)
	if err := hashBody(h, getBody, limit); err != nil {
		return ledger.Fingerprint{}, err
	}
	return h.Sum(), nil
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

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// hashBody writes at most limit bytes of the body into h and closes it.
// h is internal/fingerprint's Hasher, from its pool: a fingerprint
// allocates nothing of its own.
func hashBody(h *fingerprint.Hasher, getBody func() (io.ReadCloser, error), limit int64) error {
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
	switch err := h.Body(body, limit); {
	case errors.Is(err, fingerprint.ErrTooLong):
		return fmt.Errorf("%w (%d bytes)", ErrFingerprintLimit, limit)
	case err != nil:
		return fmt.Errorf("retryfuse: fingerprint: read body: %w", err)
	}
	return nil
}
