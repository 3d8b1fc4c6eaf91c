package retryfuse

import (
	"context"
	"errors"
	"net/http"

	"github.com/retryfuse/retryfuse/internal/fallback"
	"github.com/retryfuse/retryfuse/internal/fingerprint"
	"github.com/retryfuse/retryfuse/internal/share"
)

// This file is the two stages outside the call loop, outermost first: the
// Fallback, and single flight. Each is entered only when it is set.

// The Fallback, the outermost stage, as a call meets it: asked for a call
// that failed all the way, unless the request needs current data; a
// response it produced is marked. Deciding that a request needs current
// data, asking the Fallback safely and the mark are internal/fallback's.

// fallback asks the Fallback, if any, to answer for a call that ended with
// resp and err, and returns the answer to give the caller: a response of
// the Fallback's own is marked.
func (c *call) fallback(resp *http.Response, err error) (*http.Response, error) {
	fb := c.p.fallback
	if fb == nil || c.passThrough || !c.failedAllTheWay(resp, err) {
		return resp, err
	}
	if fallback.NeedsCurrent(c.req) {
		c.policyEvent(policyFallback, actionWithheld, 0, err)
		return resp, err
	}
	fresp, ferr, failure := fallback.Ask(fb, c.req, resp, err)
	if failure != nil {
		c.policyEvent(policyFallback, actionFailed, 0, failure)
		return resp, err
	}
	if fresp != nil && fresp == resp {
		c.policyEvent(policyFallback, actionHandedOn, 0, nil)
		return resp, nil // the dependency's own answer: not the Fallback's
	}
	if resp != nil {
		drain(resp, 0) // the Fallback did not hand it on: release it
	}
	if fresp != nil {
		why := c.gaveUp
		if why == nil {
			why = err
		}
		fallback.Mark(fresp, ReasonName(why))
	}
	c.policyEvent(policyFallback, actionAnswered, 0, ferr)
	return fresp, ferr
}

// WithCurrentData returns a copy of ctx that marks the requests sent with
// it as needing current data: a Transport's Fallback is not asked for
// them, and a call that fails all the way gives the caller its own
// failure, as for a request with a Cache-Control: no-cache or max-age=0
// header. The mark is not sent.
func WithCurrentData(ctx context.Context) context.Context {
	return fallback.WithCurrentData(ctx)
}

// failedAllTheWay reports whether a call's outcome is a failure the
// Fallback may answer: an error other than a reconcile error or an
// error of bad input, or a
// response the Transport gave up repeating for a reason other than its
// being final — and the caller still waiting.
func (c *call) failedAllTheWay(resp *http.Response, err error) bool {
	if c.req.Context().Err() != nil {
		return false
	}
	if err != nil {
		var rec *ReconcileRequiredError
		if errors.As(err, &rec) {
			return false
		}
		for _, bad := range inputErrors {
			if errors.Is(err, bad) {
				return false
			}
		}
		return true
	}
	return resp != nil && c.gaveUp != nil && !errors.Is(c.gaveUp, errFinal)
}

// inputErrors are the errors of a request or a Transport that is wrong:
// the caller's mistake, which a Fallback must not hide.
var inputErrors = [...]error{ErrInvalidPolicy, ErrInvalidIdempotencyKey, ErrFingerprintLimit, errNilRequest, fingerprint.ErrNilURL}

// Single flight (ReadPolicy.Share), the next stage in, as the Transport
// drives it: concurrent identical reads share one call, its retries and hedges
// included; internal/share keeps the flights, their keys and their
// results. It sits outside the retry and inside the Fallback: each caller
// gets its own copy of the shared result, and its own Fallback's answer to
// it.
//
// The shared call is an ordinary call on a goroutine of its own (fly),
// under a context detached from any one caller's, cancelled when the last
// caller has gone. It plans against the latest deadline of the callers who
// joined it (none once one had none; call.deadline) as an unshared call
// plans against its caller's, and gives up at once on a Retry-After past
// it. That deadline is not its context's, as it moves when a caller joins:
// its attempts keep their whole AttemptTimeout (attemptTimeout), and
// nothing cancels the call at that deadline but the last caller going.

// errNotShared: the request was not shared, and makes its own call.
var errNotShared = errors.New("retryfuse: not shared")

// shareable reports whether req may share a call: a read without a body
// or an upgrade (share.Eligible), which no retryfuse Transport above owns.
func shareable(req *http.Request) bool {
	if !share.Eligible(req) {
		return false
	}
	_, owned := req.Context().Value(ownerKey{}).(*Transport)
	return !owned
}

// shareRead makes req's call a shared one: it joins the call in flight
// under the request's key, or starts it. It returns errNotShared when req
// makes its own call (its key is empty, the key function panicked, or the
// shared response's body was too large to share), with the CallID its
// events were reported under, if any.
func (t *Transport) shareRead(req *http.Request) (uint64, *http.Response, error) {
	key, kerr := share.KeyOf(t.p.shareKey, req)
	c := t.sharingCall(req)
	if key == "" {
		if kerr != nil {
			c.shareEvent(actionUnshared, 0, kerr)
		}
		return c.id, nil, errNotShared
	}
	ids := &t.calls
	if !t.Hooks.any() {
		ids = nil // only hooks number the calls
	}
	f, leader := t.flights.Join(key, req, ids)
	if leader {
		c.id = f.ID()
		c.shareEvent(actionLed, f.ID(), nil)
		go t.fly(f)
	} else {
		c.shareEvent(actionFollowed, f.ID(), nil)
	}
	r, stream := t.flights.Wait(req.Context(), f, leader)
	if r == nil {
		return c.id, nil, req.Context().Err()
	}
	if r.Panicked != nil {
		panic(r.Panicked)
	}
	resp, ok := r.For(req, stream)
	if !ok {
		c.shareEvent(actionUnshared, f.ID(), &share.BodyError{Limit: t.p.maxSharedBody})
		return c.id, nil, errNotShared
	}
	if t.p.fallback == nil {
		return c.id, resp, r.Err
	}
	c.gaveUp = r.GaveUp
	c.step()
	resp, err := c.fallback(resp, r.Err)
	return c.id, resp, err
}

// sharingCall returns the call that stands for req while it shares
// another's: it makes no attempt, and only reports (its events, and the
// Fallback's).
func (t *Transport) sharingCall(req *http.Request) call {
	c := call{t: t, p: &t.p, req: req, method: req.Method}
	if c.method == "" {
		c.method = http.MethodGet
	}
	if t.Hooks.any() {
		c.start = t.p.clock.Now()
	}
	return c
}

// shareEvent reports a single-flight event of the call, shared naming the
// shared call. The call is numbered when it was not.
func (c *call) shareEvent(action string, shared uint64, err error) {
	if h := c.t.Hooks.Policy; h != nil {
		c.step() // the time of this event, not of an earlier one
		emit(h, PolicyInfo{CallInfo: c.info(), Policy: policySingleFlight, Action: action, Err: err, SharedCallID: shared})
	}
}

// fly makes the shared call of f, on its own goroutine, and publishes its
// result.
func (t *Transport) fly(f *share.Flight) {
	t.flights.Land(f, t.flyCall(f))
}

// flyCall makes the shared call of f and collects its result for the
// callers to copy; a panic is carried to them.
func (t *Transport) flyCall(f *share.Flight) (res share.Result) {
	defer func() {
		if v := recover(); v != nil {
			res = share.Result{Panicked: v}
		}
	}()
	c := call{t: t, p: &t.p, req: f.Request(), w: new(wire), id: f.ID(), flight: f}
	if c.id != 0 {
		c.start = t.p.clock.Now()
	}
	resp, err := c.run()
	res = f.Collect(resp, err, t.p.maxSharedBody)
	res.GaveUp = c.gaveUp
	return res
}
