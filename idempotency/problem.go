package idempotency

import (
	"encoding/json"
	"net/http"

	"github.com/retryfuse/retryfuse/internal/honour"
)

// This file is the middleware's refusals: problem details (RFC 9457).

// The problem types of the refusals, the "type" member of their problem
// details (RFC 9457, application/problem+json). Each is the address of
// its own documentation, and each refusal has a type of its own, so that
// a client tells them apart by type rather than by status. The names of
// those a client of package retryfuse reads are internal/honour's, which
// both halves share.
const (
	// ProblemKeyMissing (400): the request needs an Idempotency-Key and
	// has none (draft Section 2.7).
	ProblemKeyMissing = problemBase + "ProblemKeyMissing"
	// ProblemKeyMalformed (400): the key header is not a key: empty, longer
	// than MaxKeyLen, a byte that is not visible ASCII, a quoted key
	// badly quoted, sent twice, or two headers that disagree (draft
	// Sections 2.1 and 5). Nothing was run.
	ProblemKeyMalformed = problemBase + "ProblemKeyMalformed"
	// ProblemBodyTooLarge (413): the body is longer than Config.MaxBodyBytes,
	// so it cannot be fingerprinted (draft Section 2.4); nothing was run.
	ProblemBodyTooLarge = problemBase + "ProblemBodyTooLarge"
	// ProblemKeyReused (422): the key was used for another request: another
	// body, method or path (draft Sections 2.2 and 2.7). Nothing was run;
	// send the request under a key of its own.
	ProblemKeyReused = problemBase + honour.ProblemKeyReused
	// ProblemInFlight (409, with Retry-After): a request under the key is
	// being processed (draft Section 2.7). Send it again after Retry-After
	// to get its result.
	ProblemInFlight = problemBase + honour.ProblemInFlight
	// ProblemOutcomeUnknown (409): an earlier request under the key ended
	// without a result (its handler panicked, or its claim expired): its
	// effect may or may not have happened, and the server will not run it
	// again. Find out what happened (read the resource) before sending
	// anything under another key. The key stays held for the Ledger's TTL.
	ProblemOutcomeUnknown = problemBase + honour.ProblemOutcomeUnknown
	// ProblemNotStored (409): an earlier request under the key completed,
	// but its response was not stored (too large, or its handler took the
	// connection over), so it cannot be replayed. Its effect happened: do
	// not send it again under another key.
	ProblemNotStored = problemBase + honour.ProblemNotStored
	// ProblemLedgerUnavailable (503, with Retry-After): the Ledger could not
	// say whether the key is free, so nothing was run. Send the request
	// again, with the same key, after Retry-After.
	ProblemLedgerUnavailable = problemBase + "ProblemLedgerUnavailable"
)

const (
	problemBase = "https://pkg.go.dev/github.com/retryfuse/retryfuse/idempotency#"
	draft       = "draft-ietf-httpapi-idempotency-key-header-07"
)

// problem is a problem details object (RFC 9457, Section 3.1).
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// The problems the middleware answers with, but for their detail.
var (
	keyMissing = problem{ProblemKeyMissing, "Idempotency-Key is missing", http.StatusBadRequest,
		"This operation requires an Idempotency-Key header (" + draft + ", Section 2.7)."}
	keyMalformed = problem{ProblemKeyMalformed, "Idempotency-Key is malformed", http.StatusBadRequest, ""}
	bodyTooLarge = problem{ProblemBodyTooLarge, "Request body too large to fingerprint", http.StatusRequestEntityTooLarge, ""}
	keyReused    = problem{ProblemKeyReused, "Idempotency-Key is already used", http.StatusUnprocessableEntity,
		"This Idempotency-Key was used for another request (another body, method or path); it must not be reused across different requests (" + draft + ", Sections 2.2 and 2.7)."}
	inFlight = problem{ProblemInFlight, "A request is outstanding for this Idempotency-Key", http.StatusConflict,
		"A request with the same Idempotency-Key is being processed; send it again after Retry-After to get its result (" + draft + ", Section 2.7)."}
	outcomeUnknown = problem{ProblemOutcomeUnknown, "The outcome of the earlier request under this Idempotency-Key is unknown", http.StatusConflict,
		"An earlier request under this Idempotency-Key ended without a result: its effect may have happened, and it will not be run again under this key. Check the resource's state before sending the operation under another key (" + draft + ", Section 2.6, assumes every request ends with a result; this one did not)."}
	notStored = problem{ProblemNotStored, "The response to this Idempotency-Key was not stored", http.StatusConflict,
		"An earlier request under this Idempotency-Key completed, but its response was not stored, so it cannot be replayed (" + draft + ", Section 2.6, asks for the earlier result). Its effect happened: do not send it again under another key."}
	ledgerUnavailable = problem{ProblemLedgerUnavailable, "Idempotency-Key state unavailable", http.StatusServiceUnavailable,
		"The store of Idempotency-Keys cannot be reached, so the request was not processed; send it again with the same key after Retry-After (" + draft + ", Section 2.7: other errors)."}
	bodyUnreadable = problem{"about:blank", "Bad Request", http.StatusBadRequest, "The request body could not be read."}
)

// write sends p as the response, with detail when not empty.
func (p problem) write(w http.ResponseWriter, detail string) {
	if detail != "" {
		p.Detail = detail
	}
	b, _ := json.Marshal(p) // strings and an int: never fails
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Language", "en")
	h.Del("Content-Length")
	w.WriteHeader(p.Status)
	w.Write(b)
}
