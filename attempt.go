package retryfuse

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/backoff"
	"github.com/retryfuse/retryfuse/internal/honour"
	"github.com/retryfuse/retryfuse/internal/reqbody"
)

// attempt is what one attempt established: its response or error, and
// their classification.
type attempt struct {
	resp     *http.Response
	err      error
	resends  int           // the base's own re-sends within the attempt that went out
	stopped  error         // why a further re-send was stopped (ErrAttemptsExhausted, ErrBudgetExhausted), or nil
	evidence *budgetError  // the budget's errors while it was asked for the re-sends
	keyed    honour.Answer // what a server that honours keys answered about the key
	result
}

// send makes the next attempt, which the gates admitted with pass, and
// tells the gates what it showed. It returns an error, and makes no
// attempt, when the request's body cannot be had again (GetBody failed).
// Should the attempt panic (in the base), the pass is given back on the
// way up: a probe that never returned its breaker slot would keep a
// half-open scope refusing every request for good.
func (c *call) send(ps pass) (a attempt, err error) {
	left := false
	defer func() {
		if !left {
			c.leave(ps, attempt{result: result{ignored: true}})
		}
	}()
	body, err := c.body()
	if err != nil {
		return attempt{}, err
	}
	c.attempt++
	var f flight
	c.prepare(&f, c.ctx, &c.w.trace, body, false)
	c.started(&f)
	resp, err := f.exchange(c.p.base)
	a = c.finish(&f, resp, err)
	c.leave(ps, a)
	left = true
	return a, nil
}

// body returns the body of the next attempt: the request's own for the
// first, a new one from GetBody for a retry. A request without a body has
// nothing to replay; one with a body got to a retry only with GetBody set
// (replayableBody).
func (c *call) body() (io.ReadCloser, error) {
	if c.attempt == 0 || c.req.Body == nil || c.req.Body == http.NoBody {
		return c.req.Body, nil
	}
	return c.req.GetBody()
}

// flight is one attempt on its way: its request, trace and timeout.
type flight struct {
	req     *http.Request // a shallow copy of the caller's, never the caller's own
	trace   *attemptTrace
	number  int // the attempt's number in the call, from 1
	branch  int // its branch within a hedged group; 0 for the first
	timeout time.Duration
	cancel  context.CancelFunc // nil when nothing needs cancelling
	timer   *time.Timer        // strikes at timeout
	watched *reqbody.Watcher
	began   time.Time
}

// prepare makes f the next attempt's, on ctx, under the trace at and the
// attempt's timeout. cancellable makes its context cancellable even
// without a timeout (a hedged branch, which its group may cancel).
func (c *call) prepare(f *flight, ctx context.Context, at *attemptTrace, body io.ReadCloser, cancellable bool) {
	p := c.p
	*f = flight{trace: at, number: c.attempt, timeout: c.attemptTimeout()}
	owner := c.t
	if c.passThrough {
		owner = nil // the Transport above marked it
	}
	var deadline time.Time // the attempt's own: its context reports it
	if f.timeout > 0 {
		deadline = c.now().Add(f.timeout)
	}
	ctx = at.context(ctx, owner, deadline, !p.tracing)
	if f.timeout > 0 || cancellable {
		ctx, f.cancel = context.WithCancel(ctx)
	}
	if f.timeout > 0 {
		// A timer per attempt, never pooled: a timer belongs to the
		// testing/synctest bubble it was made in, and one re-armed outside
		// it is a fatal error (TestAttemptTimeoutInAndOutOfASynctestBubble).
		f.timer = time.AfterFunc(f.timeout, f.cancel)
	}
	// The attempt's context is made cancellable for its timeout or its
	// group, never for its re-sends alone: those are stopped without it
	// (resend.go), and the default attempt allocates no context.
	at.w, at.cancel = c.resendGate(), f.cancel
	if !c.copied {
		// The first attempt's copy lives in the call. WithContext is
		// inlined, and the copy it makes does not escape.
		c.copied = true
		c.w.first = *c.req.WithContext(ctx)
		f.req = &c.w.first
	} else {
		f.req = c.req.WithContext(ctx)
	}
	if c.header != nil {
		f.req.Header = c.header
	}
	f.req.Body = body
	if body != nil && body != http.NoBody { // a body to watch (internal/reqbody)
		if f.watched = reqbody.Watch(body); f.watched != nil {
			f.req.Body = f.watched
		}
	}
}

// started reports an attempt about to be sent.
func (c *call) started(f *flight) {
	t := c.t
	if h := t.Hooks.AttemptStart; h != nil {
		c.phase = decide.PhaseUnknown
		c.hookPanicked("Hooks.AttemptStart", emit(h, AttemptStartInfo{CallInfo: c.infoOf(f, decide.PhaseUnknown), Timeout: f.timeout}))
	}
	if t.Hooks.AttemptDone != nil || t.Hooks.HiddenResend != nil {
		f.began = c.now()
	}
}

// exchange sends the attempt through base and applies its timeout: an
// error after the timer struck is the timeout's doing, and a response's
// body keeps the attempt's context alive until it is closed.
func (f *flight) exchange(base http.RoundTripper) (*http.Response, error) {
	resp, err := base.RoundTrip(f.req)
	if f.cancel != nil {
		stopped := f.timer == nil || f.timer.Stop()
		switch {
		case err != nil:
			f.cancel()
			if !stopped { // the timer struck: the error is its doing
				err = &attemptTimeoutError{after: f.timeout, err: err}
			}
		case !stopped:
			// The timer struck as the headers arrived: the body is already
			// cut off, so the attempt counts as timed out.
			drain(resp, 0)
			f.cancel()
			resp, err = nil, &attemptTimeoutError{after: f.timeout, err: context.Canceled}
		case resp.Body == nil || resp.Body == http.NoBody:
			f.cancel() // no body to read: the attempt is over, and nil or NoBody stays as it is
		default:
			resp.Body = cancelOnClose(resp.Body, f.cancel)
		}
	}
	if resp == nil && err == nil {
		err = errNilResponse
	}
	return resp, err
}

// finish classifies an attempt's result and reports it.
func (c *call) finish(f *flight, resp *http.Response, err error) attempt {
	t, p := c.t, c.p
	c.step() // the attempt has returned: its end, the breaker's and the hooks' time
	callerDone := c.req.Context().Err() != nil
	bodyErr := f.watched != nil && f.watched.Failed(err)
	stopped := f.trace.stopped()
	if stopped != nil && resp == nil && !callerDone && !bodyErr {
		// Whatever the base returned is the stop's doing: a connection
		// closed before the write, or the attempt's context cancelled.
		err = errResendStopped
	}
	a := attempt{resp: resp, err: err, result: classify(p.classifier, resp, err, f.trace.phase(resp, p.tracing), callerDone, bodyErr)}
	c.hookPanicked("Retry.Classifier", a.panicked)
	if stopped != nil && !a.ignored {
		c.stoppedResend(&a, stopped)
	}
	if resp != nil && c.key.present && !c.passThrough {
		c.learnHonour(resp)
		switch a.keyed = honour.Read(resp); a.keyed {
		case honour.AnswerInFlight:
			// The server runs the first request under the key: it will
			// not run this one twice, and answers it once the first ends.
			a.outcome, a.retryable = decide.OutcomeFailure, true
		case honour.AnswerReplayed, honour.AnswerUnknown, honour.AnswerNotStored:
			// The server's answer for the key, whatever its status: sent
			// again, the request gets it again.
			a.retryable = false
		}
	}
	n := int(f.trace.conns.Load())
	if n > 1 {
		a.resends = n - 1
	}
	a.evidence = f.trace.evidence.Load()
	if t.Hooks.AttemptDone == nil && (a.resends == 0 || t.Hooks.HiddenResend == nil) {
		return a
	}
	c.phase = a.phase
	info := AttemptDoneInfo{CallInfo: c.infoOf(f, a.phase), Err: err, Outcome: a.outcome, Retryable: a.retryable,
		Duration: c.now().Sub(f.began), Connections: n}
	if resp != nil {
		info.StatusCode, info.Replayed = resp.StatusCode, honour.Replayed(resp)
		if a.retryable {
			info.Err = statusError(resp, c.now())
		}
	}
	if a.resends > 0 {
		c.hookPanicked("Hooks.HiddenResend", emit(t.Hooks.HiddenResend, info))
	}
	c.hookPanicked("Hooks.AttemptDone", emit(t.Hooks.AttemptDone, info))
	return a
}

// stoppedResend marks attempt a, whose base was stopped from re-sending
// the request by itself, with why. Without a response, a counts as
// retryable: the base re-sent after failures it judged safe to repeat. net/http's Transport
// re-sends a request it does not judge replayable (see replayedAfterWrite)
// only when nothing of it was written, and HTTP/2 only a stream the server
// did not process: such an attempt, stopped before its next write, wrote
// nothing that can have taken effect.
func (c *call) stoppedResend(a *attempt, why error) {
	a.stopped = why
	if a.resp != nil {
		return
	}
	a.retryable = true
	header := c.header
	if header == nil {
		header = c.req.Header
	}
	if c.p.tracing && !replayedAfterWrite(c.method, header) {
		a.phase, a.outcome = decide.PhasePreWrite, decide.OutcomeFailure
	}
}

var errNilResponse = errors.New("retryfuse: base RoundTripper returned neither a response nor an error")

func statusError(resp *http.Response, now time.Time) *StatusError {
	ra, _ := backoff.RetryAfter(resp, now)
	return &StatusError{StatusCode: resp.StatusCode, Status: resp.Status, RetryAfter: ra}
}

// attemptTimeout is the timeout of the next attempt: AttemptTimeout, or
// zero when the caller's deadline comes first anyway. A shared read's
// deadline is no such end: nothing cancels the call at it, and a caller
// who joins may move it, so its attempts keep their timeout.
func (c *call) attemptTimeout() time.Duration {
	d := c.p.attemptTimeout
	if d <= 0 {
		return 0
	}
	if c.flight != nil {
		return d
	}
	if dl, ok := c.ctx.Deadline(); ok && dl.Sub(c.now()) <= d {
		return 0
	}
	return d
}

// deadline is the deadline the call plans its waits and gates against:
// its caller's, or, for a shared read, the latest of its callers'
// (share.Flight.Latest).
func (c *call) deadline() (time.Time, bool) {
	if c.flight != nil {
		return c.flight.Latest()
	}
	return c.ctx.Deadline()
}

// drain reads a discarded response body up to limit bytes, and one byte
// more, and closes it, so that its connection can be reused. The extra
// byte: the end of a body of exactly limit bytes is seen only by reading
// past it (a chunked body's last chunk), and without that end net/http
// closes the connection.
func drain(resp *http.Response, limit int64) {
	if resp == nil || resp.Body == nil {
		return
	}
	if limit > 0 {
		_, _ = io.CopyN(io.Discard, resp.Body, min(limit, math.MaxInt64-1)+1)
	}
	_ = resp.Body.Close()
}

// cancelOnClose wraps a response body so that closing it releases the
// attempt's context, keeping the body readable until then. A body that is
// also a writer (the connection of a 101 Switching Protocols response)
// stays one.
func cancelOnClose(body io.ReadCloser, cancel context.CancelFunc) io.ReadCloser {
	if rw, ok := body.(io.ReadWriteCloser); ok {
		return &cancelOnCloseRW{ReadWriteCloser: rw, cancel: cancel}
	}
	return &cancelOnCloseR{ReadCloser: body, cancel: cancel}
}

type cancelOnCloseR struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnCloseR) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

type cancelOnCloseRW struct {
	io.ReadWriteCloser
	cancel context.CancelFunc
}

func (b *cancelOnCloseRW) Close() error {
	err := b.ReadWriteCloser.Close()
	b.cancel()
	return err
}

// attemptTimeoutError is the error of an attempt cut by AttemptTimeout. It
// matches ErrAttemptTimeout and the error the base returned, and is a
// net.Error whose Timeout is true. The base's error is most often the
// context.Canceled of the attempt's context, cancelled by its timer: that
// one is not the caller's cancellation, and is matched as
// context.DeadlineExceeded instead, as net/http's own timeouts are.
type attemptTimeoutError struct {
	after time.Duration
	err   error
}

// Error says what timed out. The base's error is left out when it is only
// the cancellation of the attempt's context by its timer, which the chain
// matches as context.DeadlineExceeded, not context.Canceled.
func (e *attemptTimeoutError) Error() string {
	s := "retryfuse: attempt timed out after " + e.after.String()
	if errors.Is(e.err, context.Canceled) {
		return s
	}
	return s + ": " + e.err.Error()
}
func (e *attemptTimeoutError) Unwrap() []error {
	if errors.Is(e.err, context.Canceled) {
		return []error{ErrAttemptTimeout, context.DeadlineExceeded}
	}
	return []error{ErrAttemptTimeout, e.err}
}
func (e *attemptTimeoutError) Timeout() bool   { return true }
func (e *attemptTimeoutError) Temporary() bool { return true }
