package retryfuse

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/decide"
)

// This file is the client's side of a server that honours Idempotency-Key
// (package idempotency is such a server's middleware): whether a scope is
// known to honour keys (declared, or learnt from a marker on its
// responses, for a bounded time), and what its answers mean for a keyed
// request: a 409 while the first request under the key runs is retried; a
// 422 for a key reused with another payload is the conflict error; a
// replayed response is reported as one. Known to honour keys, a scope may
// be sent an uncertain keyed write again, with the same key and body
// (decision contract version 2): the server answers with the stored result
// or runs it once.

// The headers of a server that honours keys (package idempotency).
const (
	// headerHonoured on a response says that its server honours
	// Idempotency-Key: "?1", a Structured Field Boolean.
	headerHonoured = "Idempotency-Key-Honoured"
	// headerReplayed on a response says that it is the stored response of
	// an earlier request under the key: "true".
	headerReplayed = "Idempotent-Replayed"
)

// The problem types (RFC 9457) by which such a server refuses a keyed
// request, matched by their fragment.
const (
	problemInFlight = "#ProblemInFlight"  // 409: the first request under the key still runs
	problemReused   = "#ProblemKeyReused" // 422: the key was used with another payload
)

// defaultHonourMemory is how long a scope is taken to honour keys after a
// response that says so, when Transport.HonourMemory is zero.
const defaultHonourMemory = 10 * time.Minute

// honour is what a scope's record knows of its server's keys: until when
// it is known to honour them (Unix nanoseconds of the Transport's clock; 0:
// not known).
type honour struct{ until atomic.Int64 }

// serverHonoursKeys reports whether the call's server is known to honour
// Idempotency-Key: declared for every scope, or learnt within the memory.
func (c *call) serverHonoursKeys() bool {
	if c.p.honoursKeys {
		return true
	}
	if c.p.honourMemory <= 0 || !c.key.present {
		return false
	}
	st, err := c.scopeRecord()
	return err == nil && st.honour.until.Load() > c.now().UnixNano()
}

// learnHonour notes the server's marker on resp, if any: the scope honours
// keys for the memory's length from now.
func (c *call) learnHonour(resp *http.Response) {
	if c.p.honourMemory <= 0 || resp == nil || resp.Header.Get(headerHonoured) != "?1" {
		return
	}
	if st, err := c.scopeRecord(); err == nil {
		st.honour.until.Store(c.now().Add(c.p.honourMemory).UnixNano())
	}
}

// keyedAnswer is what a keyed request's response means, from a server that
// honours keys.
type keyedAnswer uint8

const (
	answerPlain    keyedAnswer = iota // nothing of the key's
	answerInFlight                    // 409: the first request under the key still runs; retry it later
	answerReused                      // 422: the key was used with another payload
)

// maxProblemBytes bounds the problem details read to tell a refusal's
// type: such bodies are a few hundred bytes.
const maxProblemBytes = 4 << 10

// readKeyedAnswer tells what resp means for the keyed request that got it.
// Only a 409 or 422 from a server that says it honours keys, whose body is
// problem details, is read (at most maxProblemBytes; the body is given
// back whole): a handler's own 409 or 422 behind the same server is its
// result, not the key's.
func readKeyedAnswer(resp *http.Response) keyedAnswer {
	if resp == nil || (resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusUnprocessableEntity) ||
		resp.Header.Get(headerHonoured) != "?1" || resp.Body == nil || resp.Body == http.NoBody {
		return answerPlain
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != "application/problem+json" {
		return answerPlain
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxProblemBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	if err != nil {
		return answerPlain
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(b, &p) != nil {
		return answerPlain
	}
	switch {
	case resp.StatusCode == http.StatusConflict && strings.HasSuffix(p.Type, problemInFlight):
		return answerInFlight
	case resp.StatusCode == http.StatusUnprocessableEntity && strings.HasSuffix(p.Type, problemReused):
		return answerReused
	}
	return answerPlain
}

// noteRepeated keeps, when the attempt a left the call's write uncertain
// and the verdict v lets it be repeated (the server honours keys), the
// reconcile error the call ends with unless an answer settles the write.
func (c *call) noteRepeated(a attempt, v decide.Verdict) {
	if v.Decision == decide.ReconcileRequired || decide.IdempotentMethod(c.method) {
		return
	}
	if a.outcome == decide.OutcomeUnknown || (a.outcome == decide.OutcomeTimeout && a.phase != decide.PhasePreWrite) {
		c.repeated = c.reconcileError(a.err)
	}
}

// stopUnsettled ends a call that repeated an uncertain write and stops
// (reason: its attempts, its budget or its deadline ran out; a brake) with
// no response since that settles it: a success or a final answer. The
// first attempts may have applied the write, and a 503 or a 409 answered
// to a repeat says nothing of them: the caller reconciles, as for a write
// never repeated, and the key is held. The response set aside, if any, is
// closed.
func (c *call) stopUnsettled(reason error, v decide.Verdict) (*http.Response, error) {
	c.giveUp(reason, v)
	rec := c.repeated
	rec.Attempts = c.attempt
	res := c.reconcile(rec)
	switch res.resolution {
	case resolutionApplied:
		drain(c.lastResp, 0)
		c.confirmed, c.notStored = true, true
		return res.resp, nil
	case resolutionNotApplied:
		// Known not to have happened: the call ends as its last attempt did.
		if c.lastResp != nil {
			return c.lastResp, nil
		}
		return nil, &RetryError{Reason: reason, Last: c.lastErr, Attempts: c.attempt}
	}
	drain(c.lastResp, 0)
	c.uncertain = true
	return nil, rec
}

// replayed reports whether resp is a stored response a server replayed.
func replayed(resp *http.Response) bool {
	return resp != nil && resp.Header.Get(headerReplayed) == "true"
}
