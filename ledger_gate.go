package retryfuse

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/fingerprint"
	"github.com/retryfuse/retryfuse/internal/keymemory"
	"github.com/retryfuse/retryfuse/internal/stored"
	"github.com/retryfuse/retryfuse/ledger"
)

// This file is the key ledger's gate in the transport: the claim taken
// before the first attempt, and the settlement of the claim when the call
// ends.

// claim asks the ledger about the call's key. It returns the key state for
// the decision core and, for a completed key, its stored result. Without a
// ledger, a key, or a body that can be fingerprinted, the state is none.
// A ledger that cannot answer is not taken to mean the key is free.
func (c *call) claim() (decide.KeyState, *ledger.StoredResponse, error) {
	l := c.p.ledger
	// A generated key is new by construction: no earlier call can hold it,
	// so it would fill the ledger without ever catching a duplicate.
	if c.passThrough || !c.key.present || c.key.generated {
		return decide.KeyNone, nil, nil
	}
	if l == nil {
		return c.recall(), nil, nil
	}
	if !c.facts.ReplayableBody {
		return decide.KeyNone, nil, nil
	}
	if origin := fingerprint.RedirectOrigin(c.req); origin != c.req && origin.Method != c.method {
		// http.Client follows a 301, 302 or 303 with a GET of the result
		// that carries the write's headers, key included: another
		// operation, not a second sending of the write.
		return decide.KeyNone, nil, nil
	}
	fp, err := fingerprint.Request(c.req, c.p.maxFP)
	if err != nil {
		return decide.KeyNone, nil, err
	}
	c.ledgerKey = c.scopedKey()
	cl, err := c.begin(l, fp)
	c.step() // a ledger may be remote: time has passed
	if err != nil {
		emit(c.t.Hooks.EvidenceUnavailable, EvidenceUnavailableInfo{CallInfo: c.info(), Source: "ledger", Err: err})
		return decide.KeyNone, nil, fmt.Errorf("%w: %w", ErrLedgerUnavailable, err)
	}
	switch cl.State {
	case decide.KeyNone:
		c.ledgerToken = cl.Token
	case decide.KeyInFlight:
		c.earlierUncertain = cl.Uncertain
		c.heldToken = cl.Token // the earlier call's, for Resolve
		if cl.Uncertain && !c.t.keys.Empty() {
			// What this process knows of that call, if it was its own.
			m, _ := c.t.keys.Lookup(c.ledgerKey, c.p.clock.Now())
			c.earlier = m.Earlier
		}
	}
	return cl.State, cl.Stored, nil
}

// begin claims the call's key for fp bound to the credentials the request
// carries (KeyPolicy.Credentials), so that a key held for a request that
// carried other ones is a conflict. A conflict under the current key of
// the hash is looked up again under each previous one: a Begin that meets
// a key stored under another fingerprint claims nothing, it only finds
// the key's state under its own.
func (c *call) begin(l ledger.Ledger, fp ledger.Fingerprint) (ledger.Claim, error) {
	creds, h := c.p.creds, c.req.Header
	c.credsBound = creds != nil
	cl, err := l.Begin(c.req.Context(), c.ledgerKey, creds.Bind(fp, h, 0))
	if err != nil || cl.State != decide.KeyConflict || !creds.Carried(h) {
		return cl, err
	}
	for i := 1; i < creds.Keys(); i++ {
		if again, err := l.Begin(c.req.Context(), c.ledgerKey, creds.Bind(fp, h, i)); err != nil || again.State != decide.KeyConflict {
			return again, err
		}
	}
	return cl, nil
}

// recall looks the call's key up in the Transport's memory, when it has no
// Ledger: a key whose write was left uncertain is held (KeyInFlight, an
// earlier uncertain call), one learnt to have been applied is completed
// without a stored result. Either way the call is told to reconcile.
func (c *call) recall() decide.KeyState {
	c.memoized = true
	if c.t.keys.Empty() {
		// Nothing remembered, as is usual: the key's name is built only
		// if the call must be remembered.
		return decide.KeyNone
	}
	switch m, found := c.t.keys.Lookup(c.memo(), c.p.clock.Now()); {
	case !found:
		return decide.KeyNone
	case m.Applied:
		return decide.KeyCompleted
	default:
		c.earlier = m.Earlier
		c.heldGen = new(atomic.Uint64)
		c.heldGen.Store(m.Gen()) // the hold a refusal's error may end
	}
	c.earlierUncertain = true
	return decide.KeyInFlight
}

// rememberUncertain keeps the call's key in the Transport's memory once
// its write is left uncertain. Without a ledger, the memory holds the key;
// with one, it keeps what a later call refused because of this one is
// told.
func (c *call) rememberUncertain() {
	key := c.ledgerKey
	if c.memoized {
		key = c.memo()
	}
	now := c.p.clock.Now()
	gen := c.t.keys.Remember(key, keymemory.Memo{Earlier: keymemory.Uncertain{At: now, Attempts: c.attempt, Phase: c.phase}}, now)
	if c.memoized && c.heldGen != nil {
		c.heldGen.Store(gen) // the hold the call's reconcile error ends
	}
}

// memo returns the call's key in the Transport's memory, built on first
// use.
func (c *call) memo() string {
	if c.memoKey == "" {
		c.memoKey = c.scopedKey()
	}
	return c.memoKey
}

// scopedKey returns the call's key as the ledger and the Transport's
// memory know it: its scope, a space, the idempotency key. With the
// default scope, not yet named, the scope is named too, as the start of
// the same string.
func (c *call) scopedKey() string {
	if c.scope != "" || c.p.scope != nil {
		return c.scopeName() + " " + c.key.value
	}
	k := hostScopeWith(c.req, " ", c.key.value)
	c.scope = k[:len(k)-len(c.key.value)-1]
	return k
}

// settle ends the call's claim on its key: a confirmed result completes
// the key (once the caller has read or closed the body, which is then
// stored up to MaxStoredBody), an uncertain write keeps it held, anything
// else frees it. It returns resp and err unchanged, but for the body
// wrapped to record it.
func (c *call) settle(resp *http.Response, err error) (*http.Response, error) {
	if c.ledgerToken == "" || c.settled {
		return resp, err
	}
	c.settled = true
	l, key, token := c.p.ledger, c.ledgerKey, c.ledgerToken
	if !c.uncertain && c.confirmed && resp != nil && !followsRedirect(resp) {
		// The claim is completed once the caller has read the body, after
		// RoundTrip returned: cp takes what it needs from the call now, and
		// not the call itself, which lives on RoundTrip's stack. The hook
		// in place as the call settles is the one told.
		cp := completion{ledger: l, ctx: context.WithoutCancel(c.req.Context()), key: key, token: token,
			notStored: c.notStored, hook: c.t.Hooks.EvidenceUnavailable, clock: c.p.clock, start: c.start}
		if cp.hook != nil {
			cp.info = c.info()
		}
		if resp.Body == nil || resp.Body == http.NoBody {
			cp.complete(resp, nil, true) // nothing to read: a caller rightly closes it unread
		} else {
			rec := &recordingBody{rc: resp.Body, limit: c.p.maxStored, completion: cp, resp: resp}
			if n := resp.ContentLength; n > 0 && n <= c.p.maxStored {
				// Room for the whole body at once, and no more: the ledger
				// keeps it without a copy.
				rec.buf = *bytes.NewBuffer(make([]byte, 0, n))
			}
			resp.Body = rec
		}
		return resp, err
	}
	// An uncertain write keeps the key held. Anything else frees it: a
	// failure, and a redirect followed with the same method and body (not a
	// completion: the operation is sent again, with its key, to the new
	// location, and that request claims it).
	ctx, cancel := ledgerStepContext(c.req.Context())
	var lerr error
	switch {
	case c.uncertain:
		lerr = l.Uncertain(ctx, key, token)
	case c.applied:
		lerr = l.Complete(ctx, key, token, nil) // applied, nothing kept to replay
	default:
		lerr = l.Release(ctx, key, token)
	}
	cancel()
	if lerr != nil {
		emit(c.t.Hooks.EvidenceUnavailable, EvidenceUnavailableInfo{CallInfo: c.info(), Source: "ledger", Err: lerr})
	}
	return resp, err
}

// followsRedirect reports whether resp is a redirect that http.Client
// follows with the same method and body (307, 308 with a Location): not a
// result, but a pointer to where the operation is to be sent.
func followsRedirect(resp *http.Response) bool {
	return (resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect) &&
		resp.Header.Get("Location") != ""
}

// ledgerStepTimeout bounds each ledger step that settles a call (Complete,
// Release, Uncertain, and Resolve's): it runs detached from the caller's
// cancellation, which has often struck already (a deadline is what left the
// write uncertain), but not for ever.
const ledgerStepTimeout = 5 * time.Second

// ledgerStepContext returns a context for a ledger step that settles a
// call: ctx's values, without its cancellation or deadline, bounded by
// ledgerStepTimeout.
func ledgerStepContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), ledgerStepTimeout)
}

// completion is what completing a call's claim takes from the call: the
// ledger and the claim, and what the hook that reports a failure needs.
type completion struct {
	ledger     ledger.Ledger
	ctx        context.Context // the caller's values, without its cancellation
	key, token string
	notStored  bool // the result is not to be stored for replay
	hook       func(EvidenceUnavailableInfo)
	info       CallInfo // for hook
	clock      clock
	start      time.Time
}

// complete ends the claim with the confirmed result resp, whose body was
// read whole (body) or not: a result that can be replayed is stored with
// it.
func (cp *completion) complete(resp *http.Response, body []byte, whole bool) {
	var res *ledger.StoredResponse // nil: completed, but without a result to replay
	if whole && !cp.notStored && stored.HeaderFits(resp.Header) {
		res = &ledger.StoredResponse{StatusCode: resp.StatusCode, Header: resp.Header.Clone(), Body: body}
		// A session the server gave this caller is not the Ledger's to
		// keep, nor a later call's to receive.
		delete(res.Header, "Set-Cookie")
	}
	ctx, cancel := ledgerStepContext(cp.ctx)
	defer cancel()
	if err := cp.ledger.Complete(ctx, cp.key, cp.token, res); err != nil && cp.hook != nil {
		info := cp.info
		info.Elapsed = cp.clock.Now().Sub(cp.start)
		emit(cp.hook, EvidenceUnavailableInfo{CallInfo: info, Source: "ledger", Err: err})
	}
}

// settleOnPanic, deferred by run, ends the claim of a call that leaves run
// without settling: one that a panic (of the base, a Budget, a Scope
// function) cuts short, the panic going on up. Left in
// flight, the key would stay held until its claim expired and then be
// uncertain, though the call may have sent nothing. Once an attempt has
// started, its outcome is unknown.
func (c *call) settleOnPanic() {
	if c.settled {
		return
	}
	c.confirmed, c.uncertain = false, c.attempt > 0
	c.settle(nil, nil)
}

// recordingBody passes a response body through to the caller and keeps a
// copy of up to limit bytes; when the body ends (EOF) or is closed, the
// call completes its claim with what was read, if it was the whole body.
type recordingBody struct {
	rc         io.ReadCloser
	completion // of the call's claim
	resp       *http.Response
	limit      int64
	buf        bytes.Buffer
	over       bool
	once       sync.Once
}

func (b *recordingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && !b.over {
		if int64(b.buf.Len()+n) > b.limit {
			b.over = true
			b.buf = bytes.Buffer{}
		} else {
			b.buf.Write(p[:n])
		}
	}
	if err == io.EOF {
		b.finish(!b.over)
	} else if err != nil {
		b.finish(false)
	}
	return n, err
}

func (b *recordingBody) Close() error {
	err := b.rc.Close()
	b.finish(false) // a body closed before its end was not seen whole
	return err
}

// finish reports the end of the body once. Only a whole body, seen by
// Read, is passed on: Close may run concurrently with a Read still
// appending to buf (to abort it), so an unfinished body is never touched.
func (b *recordingBody) finish(whole bool) {
	b.once.Do(func() {
		var body []byte
		if whole {
			body = b.buf.Bytes()
		}
		b.complete(b.resp, body, whole)
	})
}

// storedResponse turns a stored result into a response for req.
func storedResponse(s *ledger.StoredResponse, req *http.Request) *http.Response {
	return &http.Response{
		Status:        strconv.Itoa(s.StatusCode) + " " + http.StatusText(s.StatusCode),
		StatusCode:    s.StatusCode,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        s.Header,
		Body:          io.NopCloser(bytes.NewReader(s.Body)),
		ContentLength: int64(len(s.Body)),
		Request:       req,
	}
}
