package retryfuse

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/decide"
)

// attempt is what one attempt established: its response or error, and
// their classification.
type attempt struct {
	resp    *http.Response
	err     error
	resends int // the base's own re-sends within the attempt
	result
}

// send makes the next attempt, which the breaker admitted with ticket, and
// tells the breaker what it showed. It returns an error, and makes no
// attempt, when the request's body cannot be had again (GetBody failed).
// Should the attempt panic (in the base), the ticket is given back on the
// way up: a probe that never returned its slot would keep a half-open
// scope refusing every request for good.
func (c *call) send(ticket breakerTicket) (a attempt, err error) {
	observed := false
	defer func() {
		if !observed {
			c.observe(ticket, attempt{result: result{ignored: true}})
		}
	}()
	body, err := c.body()
	if err != nil {
		return attempt{}, err
	}
	c.attempt++
	a = c.roundTrip(body)
	c.observe(ticket, a)
	observed = true
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

// roundTrip sends one attempt with body through the base, under the
// attempt's trace and timeout, and classifies its result.
func (c *call) roundTrip(body io.ReadCloser) attempt {
	t, p := c.t, c.p
	at := &c.trace
	ctx := at.context(c.ctx, !p.tracing)
	timeout := c.attemptTimeout()
	var (
		cancel context.CancelFunc
		timer  *time.Timer
	)
	if timeout > 0 {
		ctx, cancel = context.WithCancel(ctx)
		timer = time.AfterFunc(timeout, cancel)
	}
	r2 := c.req.WithContext(ctx) // a shallow copy: the caller's request is never modified
	if c.header != nil {
		r2.Header = c.header
	}
	r2.Body = body
	var watched *bodyWatcher
	if r2.Body != nil && r2.Body != http.NoBody {
		watched = &bodyWatcher{ReadCloser: r2.Body}
		r2.Body = watched
	}

	if h := t.Hooks.AttemptStart; h != nil {
		c.phase = decide.PhaseUnknown
		emit(h, AttemptStartInfo{CallInfo: c.info(), Timeout: timeout})
	}
	var began time.Time
	if t.Hooks.AttemptDone != nil {
		began = p.clock.Now()
	}
	resp, err := p.base.RoundTrip(r2)
	if timer != nil {
		stopped := timer.Stop()
		switch {
		case err != nil:
			cancel()
			if !stopped { // the timer struck: the error is its doing
				err = &attemptTimeoutError{after: timeout, err: err}
			}
		case !stopped:
			// The timer struck as the headers arrived: the body is already
			// cut off, so the attempt counts as timed out.
			drain(resp, 0)
			cancel()
			resp, err = nil, &attemptTimeoutError{after: timeout, err: context.Canceled}
		case resp.Body == nil || resp.Body == http.NoBody:
			cancel() // no body to read: the attempt is over, and nil or NoBody stays as it is
		default:
			resp.Body = cancelOnClose(resp.Body, cancel)
		}
	}
	if resp == nil && err == nil {
		err = errNilResponse
	}
	callerDone := c.req.Context().Err() != nil
	bodyErr := watched != nil && watched.failed(err)
	a := attempt{resp: resp, err: err, result: classify(p.classifier, resp, err, at.phase(resp, p.tracing), callerDone, bodyErr)}

	if n := at.conns.Load(); n > 1 {
		a.resends = int(n) - 1
		c.phase = a.phase
		emit(t.Hooks.HiddenResend, HiddenResendInfo{CallInfo: c.info(), Connections: int(n)})
	}
	if h := t.Hooks.AttemptDone; h != nil {
		c.phase = a.phase
		info := AttemptDoneInfo{CallInfo: c.info(), Err: err, Outcome: a.outcome, Retryable: a.retryable, Duration: p.clock.Now().Sub(began)}
		if resp != nil {
			info.StatusCode = resp.StatusCode
			if a.retryable {
				info.Err = statusError(resp, p.clock.Now())
			}
		}
		emit(h, info)
	}
	return a
}

var errNilResponse = errors.New("retryfuse: base RoundTripper returned neither a response nor an error")

func statusError(resp *http.Response, now time.Time) *StatusError {
	ra, _ := retryAfter(resp, now)
	return &StatusError{StatusCode: resp.StatusCode, Status: resp.Status, RetryAfter: ra}
}

// attemptTimeout is the timeout of the next attempt: AttemptTimeout, or
// zero when the caller's deadline comes first anyway.
func (c *call) attemptTimeout() time.Duration {
	d := c.p.attemptTimeout
	if d <= 0 {
		return 0
	}
	if dl, ok := c.ctx.Deadline(); ok && dl.Sub(c.p.clock.Now()) <= d {
		return 0
	}
	return d
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

// bodyWatcher remembers an error of the caller's body reader, so that it
// can be told apart from a network failure.
type bodyWatcher struct {
	io.ReadCloser
	err atomic.Pointer[error]
}

func (b *bodyWatcher) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.fail(err)
	}
	return n, err
}

// fail remembers err. It is apart from Read, and not inlined, so that
// only a failing read moves an error to the heap, not every read.
//
//go:noinline
func (b *bodyWatcher) fail(err error) { b.err.Store(&err) }

// failed reports whether err comes from the body reader.
func (b *bodyWatcher) failed(err error) bool {
	be := b.err.Load()
	return err != nil && be != nil && errors.Is(err, *be)
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
