package idempotency

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/fingerprint"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is one request's way through the middleware: the key, the
// body and its fingerprint, the Ledger's answer, and the run of the
// handler for a key claimed.

// ServeHTTP runs r through the middleware: a request it does not handle
// (another method or route) goes to the next handler untouched; the first
// request under a key runs it, and its response is stored; a repeat gets
// the stored response or a refusal (see the package documentation).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.handles(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	w.Header().Set(HeaderHonoured, "?1")
	key, present, err := keyOf(r.Header)
	switch {
	case err != nil:
		keyMalformed.write(w, err.(*keyError).detail+" ("+draft+", Section 2.1: the key is a String; Section 5: keys are validated).")
		return
	case !present && h.optional:
		h.next.ServeHTTP(w, r)
		return
	case !present:
		keyMissing.write(w, "")
		return
	}
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	path, fp := h.fingerprint(r, body)
	scope := ""
	if h.scope != nil {
		scope = h.scope(r)
	}
	// The key itself holds no NUL (keyOf refuses control bytes), so that
	// the last NUL tells scope and key apart whatever the scope holds.
	lkey := scope + "\x00" + key

	if h.tx != nil {
		h.serveTx(w, r, body, path, lkey, fp) // the transactional mode: tx.go
		return
	}
	cl, err := h.claimKey(r.Context(), r, lkey, fp)
	if err == nil && cl.State == decide.KeyInFlight && cl.Uncertain && h.rerun {
		cl, err = h.rerunClaim(r, lkey, fp, cl)
	}
	if err != nil {
		h.log.Printf("idempotency: %s %s: the ledger could not claim the key: %v", r.Method, path, err)
		w.Header().Set("Retry-After", h.retryAfter)
		ledgerUnavailable.write(w, "")
		return
	}
	if cl.State != decide.KeyNone {
		h.answer(w, r, path, cl)
		return
	}
	c := &claim{}
	if r.Body != nil && r.Body != http.NoBody {
		c.body.Reset(body) // read whole: the handler reads the copy
		r.Body = &c.body
	}
	h.run(w, r.WithContext(withStepRoot(r.Context(), lkey)), c, lkey, cl.Token)
}

// answer sends the response to a claim that the handler does not run
// for: a conflict, a stored response, a key in flight or uncertain.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, path string, cl ledger.Claim) {
	switch cl.State {
	case decide.KeyConflict:
		keyReused.write(w, h.credentialsDetail())
	case decide.KeyCompleted:
		if cl.Stored == nil {
			notStored.write(w, "")
			return
		}
		replay(w, cl.Stored)
	case decide.KeyInFlight:
		if cl.Uncertain {
			outcomeUnknown.write(w, "")
			return
		}
		w.Header().Set("Retry-After", h.retryAfter)
		inFlight.write(w, "")
	default:
		h.log.Printf("idempotency: %s %s: the ledger answered with key state %v", r.Method, path, cl.State)
		w.Header().Set("Retry-After", h.retryAfter)
		ledgerUnavailable.write(w, "")
	}
}

// fingerprint returns r's escaped path, for the log, and the fingerprint
// its key is stored with: Config.Fingerprint's, or FingerprintOf r's
// parts.
func (h *Handler) fingerprint(r *http.Request, body []byte) (string, ledger.Fingerprint) {
	path, query := "/", ""
	if r.URL != nil {
		path, query = r.URL.EscapedPath(), r.URL.RawQuery
	}
	if h.fp != nil {
		return path, h.fp(r, body)
	}
	return path, FingerprintOf(r.Method, path, query, body)
}

// FingerprintOf returns the fingerprint of a request from its parts: the
// method, the escaped URL path ("/" when empty), the raw query (as sent;
// "" for none) and the body. It is the middleware's default, and equals
// what retryfuse's Transport computes for the same request, so that both
// halves of the key agree. A Config.Fingerprint that narrows the default
// calls it with less: FingerprintOf(r.Method, r.URL.EscapedPath(), "",
// body) leaves the query out.
func FingerprintOf(method, escapedPath, rawQuery string, body []byte) ledger.Fingerprint {
	return fingerprint.Of(method, escapedPath, rawQuery, body)
}

// readBody reads r's body whole, at most MaxBodyBytes of it, and reports
// whether it could; when it could not, it has answered the request.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	tooLarge := func() ([]byte, bool) {
		bodyTooLarge.write(w, "The request body is longer than "+strconv.FormatInt(h.maxBody, 10)+
			" bytes, the most this server reads to fingerprint a request under an Idempotency-Key ("+draft+", Section 2.4); it was not processed.")
		return nil, false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	if r.ContentLength > h.maxBody {
		return tooLarge()
	}
	var body []byte
	var err error
	if r.ContentLength > 0 {
		body, err = readKnown(r.Body, r.ContentLength)
	} else {
		var buf bytes.Buffer
		_, err = buf.ReadFrom(io.LimitReader(r.Body, h.maxBody+1))
		body = buf.Bytes()
	}
	var tooBig *http.MaxBytesError
	switch {
	case int64(len(body)) > h.maxBody || errors.As(err, &tooBig):
		return tooLarge()
	case err != nil:
		bodyUnreadable.write(w, "")
		return nil, false
	}
	return body, true
}

// readKnown reads a body of n bytes, as its Content-Length says, into a
// slice of that size. Bytes past n are left unread (net/http's server
// lets none through): the fingerprint and the handler see the same n.
func readKnown(r io.Reader, n int64) ([]byte, error) {
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return body, nil
}

// bufferedBody is the body the handler of a claimed key reads: the bytes
// the middleware read and fingerprinted.
type bufferedBody struct{ bytes.Reader }

func (*bufferedBody) Close() error { return nil }

// claim is what the run of a claimed key needs, in one allocation: the
// body the handler reads, the recorder it writes to with room for a small
// response body, and the response stored. Nothing in it is reused: the
// handler may keep what it was given.
type claim struct {
	body    bufferedBody
	rec     recorder
	respBuf [512]byte
	stored  ledger.StoredResponse
}

// rerunClaim releases the uncertain claim cl of a handler declared safe to
// run again (Config.RerunUncertain) and claims the key afresh. Another
// request may claim it in between: the answer is then that request's.
func (h *Handler) rerunClaim(r *http.Request, lkey string, fp ledger.Fingerprint, cl ledger.Claim) (ledger.Claim, error) {
	if err := h.ledger.Release(r.Context(), lkey, cl.Token); err != nil && !errors.Is(err, ledger.ErrToken) {
		return cl, err // ledger.ErrToken: another request settled it meanwhile; look again
	}
	return h.claimKey(r.Context(), r, lkey, fp)
}

// run runs the next handler for the key it claimed, and ends the claim
// with what the handler did: its response is stored (Complete) when it
// returns, or the key freed when it called Release; when it panics (or calls runtime.Goexit), the key is left
// uncertain (its effect may have happened) and the panic goes on.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, c *claim, lkey, token string) {
	rec := &c.rec
	rec.w, rec.max, rec.body, rec.stored, rec.unstored = w, h.maxStored, c.respBuf[:0], &c.stored, h.unstored
	returned := false
	defer func() {
		if returned {
			return
		}
		ctx, cancel := h.settleContext(r.Context())
		defer cancel()
		if err := h.ledger.Uncertain(ctx, lkey, token); err != nil {
			h.log.Printf("idempotency: %s %s: the handler did not return, and the ledger could not record its outcome as unknown: %v", r.Method, r.URL.EscapedPath(), err)
		}
	}()
	h.next.ServeHTTP(rec, r)
	returned = true
	ctx, cancel := h.settleContext(r.Context())
	defer cancel()
	if rec.released {
		if err := h.ledger.Release(ctx, lkey, token); err != nil {
			h.log.Printf("idempotency: %s %s: the handler released its key, and the ledger could not free it: %v", r.Method, r.URL.EscapedPath(), err)
		}
		return
	}
	if err := h.ledger.Complete(ctx, lkey, token, rec.result()); err != nil {
		h.log.Printf("idempotency: %s %s: the ledger could not record the handler's response: %v", r.Method, r.URL.EscapedPath(), err)
	}
}

// replay sends the stored response s, marked with HeaderReplayed.
func replay(w http.ResponseWriter, s *ledger.StoredResponse) {
	h := w.Header()
	for name, values := range s.Header {
		h[name] = values
	}
	h.Set(HeaderReplayed, "true")
	h.Set(HeaderHonoured, "?1")
	w.WriteHeader(s.StatusCode)
	w.Write(s.Body)
}
