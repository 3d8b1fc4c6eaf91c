package idempotency

import (
	"context"
	"net/http"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/fingerprint"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is what keeps one principal's key from another: the
// credentials a request carries bound into its fingerprint, and the
// response header fields that are never stored.

// credentials resolves Config.Credentials and Config.UnstoredHeaders.
func (h *Handler) credentials(cfg Config) error {
	c := cfg.Credentials
	headers := c.Headers
	if headers == nil && cfg.Scope == nil {
		headers = []string{"Authorization"}
	}
	creds, err := fingerprint.NewCredentials("idempotency: Config.Credentials", headers, c.Cookies, c.Key, c.PreviousKeys)
	if err != nil {
		return err
	}
	h.creds = creds
	h.unstored = []string{"Set-Cookie"}
	for _, name := range cfg.UnstoredHeaders {
		if name == "" {
			return invalid("Config.UnstoredHeaders", "must not hold an empty name")
		}
		if ck := http.CanonicalHeaderKey(name); ck != "Set-Cookie" {
			h.unstored = append(h.unstored, ck)
		}
	}
	return nil
}

// begin claims lkey for fp bound to the credentials r carries, through
// begin1 (the ledger's Begin, or BeginTx's). A conflict under the current
// key of the hash is looked up again under each previous key
// (Credentials.PreviousKeys), so that a key stored before the key of the
// hash changed keeps its answers; a conflict under every key stays one.
// A Begin under a previous key never claims a key stored under another
// fingerprint: it only finds the state of one stored under its own.
func begin[T any](h *Handler, r *http.Request, fp ledger.Fingerprint, begin1 func(ledger.Fingerprint) (ledger.Claim, T, error)) (ledger.Claim, T, error) {
	bound := ledger.Fingerprint(h.creds.Bind(fp, r.Header, 0))
	cl, tx, err := begin1(bound)
	if err != nil || cl.State != decide.KeyConflict || h.creds.Keys() < 2 || !h.creds.Carried(r.Header) {
		return cl, tx, err
	}
	for i := 1; i < h.creds.Keys(); i++ {
		c, t, err := begin1(ledger.Fingerprint(h.creds.Bind(fp, r.Header, i)))
		if err != nil || c.State != decide.KeyConflict {
			return c, t, err
		}
	}
	return cl, tx, nil
}

// claimKey is the ordinary mode's Begin, its credentials bound.
func (h *Handler) claimKey(ctx context.Context, r *http.Request, lkey string, fp ledger.Fingerprint) (ledger.Claim, error) {
	cl, _, err := begin(h, r, fp, func(fp ledger.Fingerprint) (ledger.Claim, struct{}, error) {
		cl, err := h.ledger.Begin(ctx, lkey, fp)
		return cl, struct{}{}, err
	})
	return cl, err
}

// without returns header itself, or a copy without the fields named
// (canonical names: Set-Cookie and Config.UnstoredHeaders, never stored)
// when it has any of them. header is left as it is: it is also the
// response sent.
func without(header http.Header, names []string) http.Header {
	has := false
	for _, name := range names {
		if _, ok := header[name]; ok {
			has = true
			break
		}
	}
	if !has {
		return header
	}
	out := header.Clone()
	for _, name := range names {
		delete(out, name)
	}
	return out
}

// credentialsDetail is the detail of a 422 when credentials are bound:
// the key may have been used by another principal, or under credentials
// that changed since.
func (h *Handler) credentialsDetail() string {
	if h.creds == nil {
		return ""
	}
	return "This Idempotency-Key was used for another request (another body, method or path), or by a request that carried other credentials (another principal, or credentials refreshed or rotated since); nothing was run, and nothing stored under the key is sent. Send the request under a key of its own (" + draft + ", Sections 2.2, 2.7 and 5)."
}
