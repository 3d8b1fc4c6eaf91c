// Package honour is the client's reading of a server that honours
// Idempotency-Key (package idempotency is such a server's middleware): the
// names of its marker and of its refusals, which both halves take from
// here; what a scope knows of the server (State: known to honour keys
// until when, learnt from the marker, the time an argument); and what a
// keyed request's answer means (Read: the 409s and the 422 told by their
// problem type, read within MaxProblemBytes; a replay). When to learn, and
// what a call does with an answer, is the root's.
package honour

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// The header fields of a server that honours keys.
const (
	// HeaderHonoured on a response says that its server honours
	// Idempotency-Key: "?1", a Structured Field Boolean.
	HeaderHonoured = "Idempotency-Key-Honoured"
	// HeaderReplayed on a response says that it is the stored response of
	// an earlier request under the key: "true".
	HeaderReplayed = "Idempotent-Replayed"
)

// The names of the problem types (RFC 9457) by which such a server refuses
// a keyed request: the fragment of the type's URI, after its "#", by which
// a client tells them apart.
const (
	ProblemInFlight       = "ProblemInFlight"       // 409: the first request under the key still runs
	ProblemKeyReused      = "ProblemKeyReused"      // 422: the key was used with another payload
	ProblemOutcomeUnknown = "ProblemOutcomeUnknown" // 409: an earlier request under the key ended without a result
	ProblemNotStored      = "ProblemNotStored"      // 409: applied, its response too large to store
)

// DefaultMemory is how long a scope is taken to honour keys after a
// response that says so, when the Transport sets no memory of its own.
const DefaultMemory = 10 * time.Minute

// State is what a scope knows of its server's keys: until when the server
// is known to honour them. The zero value knows nothing. This type is
// concurrency safe.
type State struct {
	until atomic.Int64 // Unix nanoseconds; 0: not known; math.MaxInt64: declared, and confirmed
}

// Known reports whether the server is known to honour keys at now.
func (s *State) Known(now time.Time) bool { return s.until.Load() > now.UnixNano() }

// A Change is what a response changed in a State, for the caller to
// report.
type Change uint8

const (
	Unchanged Change = iota // what was known still is
	Confirmed               // not known to honour keys before the response, known after it
	Revoked                 // known to honour keys before the response, not after it
)

// Learn notes what resp (not nil), the answer at now to a keyed request,
// says of its server's keys; write is whether the request's method is not idempotent.
// Its marker confirms that the server honours keys: for memory from now,
// or for ever when declared. A response to a keyed write without the
// marker, from the server itself (not a 5xx, 408 or 429, which a proxy in
// front answers as often), revokes what was known: a server that no longer
// honours keys (a deployment without the middleware, or a route it does
// not handle) must not be sent an uncertain write again. Learn returns the
// change, if any, from what was known at now.
func (s *State) Learn(resp *http.Response, write bool, now time.Time, memory time.Duration, declared bool) Change {
	if resp.Header.Get(HeaderHonoured) == "?1" {
		until := int64(math.MaxInt64)
		if !declared {
			until = now.Add(memory).UnixNano()
		}
		if prev := s.until.Swap(until); prev <= now.UnixNano() {
			return Confirmed
		}
		return Unchanged
	}
	code := resp.StatusCode
	if !write || code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests {
		return Unchanged
	}
	if prev := s.until.Swap(0); prev > now.UnixNano() {
		return Revoked
	}
	return Unchanged
}

// Answer is what a keyed request's response means, from a server that
// honours keys.
type Answer uint8

const (
	AnswerPlain     Answer = iota // nothing of the key's
	AnswerInFlight                // 409: the first request under the key still runs; retry it later
	AnswerReused                  // 422: the key was used with another payload
	AnswerUnknown                 // 409: an earlier request under the key may have been applied: reconcile
	AnswerNotStored               // 409: applied, and no response is kept to replay
	AnswerReplayed                // the stored response of the first request under the key: final
)

// MaxProblemBytes bounds the problem details Read reads to tell a
// refusal's type: such bodies are a few hundred bytes.
const MaxProblemBytes = 4 << 10

// Read tells what resp means for the keyed request that got it. A replayed
// response (Idempotent-Replayed: true, as package idempotency and large
// payment APIs send it) is the first request's result, final whatever its
// status. Only a 409 or 422 from a server that says it honours keys, whose
// body is problem details, is read (at most MaxProblemBytes; the body is
// given back whole): a handler's own 409 or 422 behind the same server is
// its result, not the key's.
func Read(resp *http.Response) Answer {
	if Replayed(resp) {
		return AnswerReplayed
	}
	if resp == nil || (resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusUnprocessableEntity) ||
		resp.Header.Get(HeaderHonoured) != "?1" || resp.Body == nil || resp.Body == http.NoBody {
		return AnswerPlain
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != "application/problem+json" {
		return AnswerPlain
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxProblemBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	if err != nil {
		return AnswerPlain
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(b, &p) != nil {
		return AnswerPlain
	}
	switch {
	case resp.StatusCode == http.StatusConflict && strings.HasSuffix(p.Type, "#"+ProblemInFlight):
		return AnswerInFlight
	case resp.StatusCode == http.StatusConflict && strings.HasSuffix(p.Type, "#"+ProblemOutcomeUnknown):
		return AnswerUnknown
	case resp.StatusCode == http.StatusConflict && strings.HasSuffix(p.Type, "#"+ProblemNotStored):
		return AnswerNotStored
	case resp.StatusCode == http.StatusUnprocessableEntity && strings.HasSuffix(p.Type, "#"+ProblemKeyReused):
		return AnswerReused
	}
	return AnswerPlain
}

// Replayed reports whether resp is a stored response a server replayed.
func Replayed(resp *http.Response) bool {
	return resp != nil && resp.Header.Get(HeaderReplayed) == "true"
}
