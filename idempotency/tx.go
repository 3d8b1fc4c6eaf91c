package idempotency

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is the transactional mode: where the handler's effects live
// in the database that holds the keys, the key's claim, the effects and
// the recorded response commit in one transaction.

// TxLedger is a Ledger that can claim a key inside a database transaction
// it begins, so that the handler's effects, written in that transaction
// (Tx), commit together with the claim and the recorded response. Given a
// TxLedger as Config.Ledger, the Handler runs in the transactional mode:
//
//   - It claims the key with BeginTx, runs the handler with the
//     transaction in the request's context (Tx), records the handler's
//     response in the same transaction, and commits once
//     (ClaimTx.Commit). Before the commit nothing of the request is
//     visible to anyone: not the claim, not the effects.
//   - A handler that panics, a server that dies, a connection to the
//     database that breaks, anything before the commit leaves nothing:
//     the transaction rolls back, the key is free, the effect absent, and
//     a repeat under the key runs the handler once. No key is left
//     uncertain. After the commit, a repeat gets the stored response.
//   - The response reaches the client only once committed, so that no
//     client sees a 201 for an effect rolled back. It is held in memory,
//     up to Config.MaxStoredBody bytes of body: a handler that writes
//     more is rolled back and answered 500 (ProblemResponseTooLarge): in
//     this mode the response is the record of the effect and must fit
//     it. Flush and Hijack are not supported (they report
//     http.ErrNotSupported): nothing can be sent before the commit.
//   - A commit that fails is answered 503 (ProblemLedgerUnavailable, with
//     Retry-After), the handler's response withheld: whether a failed
//     commit took effect (its acknowledgement lost) cannot be known here,
//     but either way the key's state is whole: committed, a repeat gets
//     the stored response; rolled back, it runs afresh. So the client is
//     told to send it again under the same key, never told it succeeded.
//   - A handler that calls Release (before any effect, or to undo them)
//     rolls the transaction back: the key is free, its response sent as
//     written, not stored.
//   - A handler that never calls Tx works as in the ordinary mode, its
//     response recorded in the transaction.
//
// A concurrent duplicate is answered 409 (ProblemInFlight) without
// waiting for the first request's transaction, where the database can
// tell (retryfusesql on PostgreSQL, with an advisory lock per key); see
// the TxLedger's documentation for what its database does.
type TxLedger interface {
	ledger.Ledger
	// BeginTx begins a transaction and claims key in it. With KeyNone the
	// ClaimTx holds the transaction, which the caller must end with
	// Commit or Rollback; with any other state it is nil and no
	// transaction is left open. The transaction outlives ctx's
	// cancellation (ctx bounds the claim's statements), so that a client
	// going away does not undo what the handler did.
	BeginTx(ctx context.Context, key string, fp ledger.Fingerprint) (ledger.Claim, ClaimTx, error)
}

// ClaimTx is a key claimed in a transaction of its own (TxLedger.BeginTx).
type ClaimTx interface {
	// Tx is the transaction: the handler writes its effects in it.
	Tx() *sql.Tx
	// Commit records res as the key's result in the transaction (as
	// Ledger.Complete would: nil, or beyond the ledger's bounds, completes
	// the key without a stored result) and commits. An error means the
	// outcome may be either: committed (a lost acknowledgement) or not.
	Commit(ctx context.Context, res *ledger.StoredResponse) error
	// Rollback rolls the transaction back: the key is free again and
	// nothing written in the transaction remains.
	Rollback() error
}

// ProblemResponseTooLarge (500): in the transactional mode (TxLedger),
// the handler's response body was longer than Config.MaxStoredBody, the
// most the middleware holds until the commit; the request's effects were
// rolled back and nothing remains of it. Sending it again gives the same
// answer until the server is changed.
const ProblemResponseTooLarge = problemBase + "ProblemResponseTooLarge"

var responseTooLarge = problem{ProblemResponseTooLarge, "Response too large to commit", http.StatusInternalServerError, ""}

// txKey is the context key of the handler's transaction.
type txKey struct{}

// Tx returns the transaction of the request whose context is ctx, in the
// transactional mode (see TxLedger): the handler writes its effects in
// it, and must neither commit nor roll it back (the middleware does).
// Outside that mode it returns nil.
func Tx(ctx context.Context) *sql.Tx {
	tx, _ := ctx.Value(txKey{}).(*sql.Tx)
	return tx
}

// serveTx is ServeHTTP's way for a key in the transactional mode, from
// the claim on.
func (h *Handler) serveTx(w http.ResponseWriter, r *http.Request, body []byte, path, lkey string, fp ledger.Fingerprint) {
	beginTx := func(fp ledger.Fingerprint) (ledger.Claim, ClaimTx, error) { return h.tx.BeginTx(r.Context(), lkey, fp) }
	cl, ctx, err := begin(h, r, fp, beginTx)
	if err == nil && cl.State == decide.KeyInFlight && cl.Uncertain && h.rerun {
		// A key left uncertain by the ordinary mode: free it, claim afresh.
		if err = h.ledger.Release(r.Context(), lkey, cl.Token); err == nil || errors.Is(err, ledger.ErrToken) {
			cl, ctx, err = begin(h, r, fp, beginTx)
		}
	}
	if err != nil {
		h.log.Printf("idempotency: %s %s: the ledger could not claim the key: %v", r.Method, path, err)
		w.Header().Set("Retry-After", h.retryAfter)
		ledgerUnavailable.write(w, "")
		return
	}
	if cl.State != decide.KeyNone {
		if ctx != nil {
			_ = ctx.Rollback() // not the contract's, but never left open
		}
		h.answer(w, r, path, cl)
		return
	}
	if ctx == nil {
		h.log.Printf("idempotency: %s %s: the ledger claimed the key without a transaction", r.Method, path)
		w.Header().Set("Retry-After", h.retryAfter)
		ledgerUnavailable.write(w, "")
		return
	}
	c := &claim{}
	if r.Body != nil && r.Body != http.NoBody {
		c.body.Reset(body)
		r.Body = &c.body
	}
	rctx := context.WithValue(withStepRoot(r.Context(), lkey), txKey{}, ctx.Tx())
	h.runTx(w, r.WithContext(rctx), c, path, ctx)
}

// runTx runs the next handler in the claim's transaction, the response
// held (see held) until the transaction commits.
func (h *Handler) runTx(w http.ResponseWriter, r *http.Request, c *claim, path string, ctx ClaimTx) {
	rec := &c.rec
	hd := &held{h: w.Header().Clone()}
	rec.w, rec.max, rec.body, rec.stored, rec.unstored = hd, h.maxStored, c.respBuf[:0], &c.stored, h.unstored
	returned := false
	defer func() {
		if !returned { // a panic or runtime.Goexit: nothing commits, and it goes on
			if err := ctx.Rollback(); err != nil {
				h.log.Printf("idempotency: %s %s: the handler did not return, and its transaction could not be rolled back: %v", r.Method, path, err)
			}
		}
	}()
	h.next.ServeHTTP(rec, r)
	returned = true
	res := rec.result()
	switch {
	case rec.over: // released or not: what it wrote is lost, and must not be sent cut
		if err := ctx.Rollback(); err != nil {
			h.log.Printf("idempotency: %s %s: the response was too large to hold, and the transaction could not be rolled back: %v", r.Method, path, err)
		}
		responseTooLarge.write(w, "The response body was longer than "+strconv.FormatInt(h.maxStored, 10)+
			" bytes, the most this server holds until the request's transaction commits; its effects were rolled back ("+draft+", Section 2.6: the response is the key's result).")
		return
	case rec.released:
		if err := ctx.Rollback(); err != nil {
			h.log.Printf("idempotency: %s %s: the handler released its key, and its transaction could not be rolled back: %v", r.Method, path, err)
		}
		hd.send(w, rec)
		return
	}
	sctx, cancel := h.settleContext(r.Context())
	defer cancel()
	if err := ctx.Commit(sctx, res); err != nil {
		h.log.Printf("idempotency: %s %s: the request's transaction did not commit (or its commit was not acknowledged): %v", r.Method, path, err)
		w.Header().Set("Retry-After", h.retryAfter)
		ledgerUnavailable.write(w, "The request's transaction could not be committed, or its commit was not acknowledged; the response is withheld. Send it again with the same key after Retry-After: it is either answered with the stored response or run afresh ("+draft+", Section 2.7: other errors).")
		return
	}
	hd.send(w, rec)
}

// held is the ResponseWriter under the recorder in the transactional
// mode: it keeps the header and sends nothing (the recorder keeps the
// status and body), so that nothing reaches the client before the
// commit. It has no Flush, Hijack or Unwrap: http.ResponseController
// reports http.ErrNotSupported for them.
type held struct{ h http.Header }

func (hd *held) Header() http.Header         { return hd.h }
func (hd *held) WriteHeader(int)             {}
func (hd *held) Write(p []byte) (int, error) { return len(p), nil }

// send writes the response the recorder kept to w: the header as it was
// when the status was written, the status, the body, and then the
// trailers the handler set.
func (hd *held) send(w http.ResponseWriter, rec *recorder) {
	out := w.Header()
	for name := range out {
		delete(out, name)
	}
	for name, values := range rec.header {
		out[name] = values
	}
	out.Set(HeaderHonoured, "?1")
	w.WriteHeader(rec.status)
	w.Write(rec.body)
	declared := strings.Join(rec.header.Values("Trailer"), ",")
	for name, values := range hd.h {
		if strings.HasPrefix(name, http.TrailerPrefix) || declared != "" && containsToken(declared, name) {
			out[name] = values
		}
	}
}

// containsToken reports whether the comma-separated list holds name,
// matched as header names are.
func containsToken(list, name string) bool {
	for t := range strings.SplitSeq(list, ",") {
		if strings.EqualFold(strings.TrimSpace(t), name) {
			return true
		}
	}
	return false
}
