package retryfuse

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/retryfuse/retryfuse/decide"
)

// send makes one attempt and classifies it. ok is false when the attempt
// could not be made because the body could not be replayed; resp and err
// are then what the call returns.
func (c *call) send() (resp *http.Response, r result, ok bool, err error) {
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
	if c.attempt > 1 && c.req.Body != nil && c.req.Body != http.NoBody {
		// A request without a body has nothing to replay; one with a body
		// got here only with GetBody set (replayableBody).
		body, gerr := c.req.GetBody()
		if gerr != nil {
			if cancel != nil {
				timer.Stop()
				cancel()
			}
			c.attempt-- // this retry is not sent: report the attempts made
			if c.lastResp == nil {
				// Last stays the last attempt's error; GetBody's goes beside it.
				c.lastErr = errors.Join(c.lastErr, gerr)
			}
			resp, err = c.stop(ErrNotRepeatable, decide.Verdict{})
			return resp, r, false, err
		}
		r2.Body = body
	}
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
		began = t.clock()
	}
	resp, err = p.base.RoundTrip(r2)
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
	r = classify(t.Classifier, resp, err, at.phase(resp, p.tracing), callerDone, bodyErr)

	if n := at.conns.Load(); n > 1 {
		c.phase = r.phase
		emit(t.Hooks.HiddenResend, HiddenResendInfo{CallInfo: c.info(), Connections: int(n)})
	}
	if h := t.Hooks.AttemptDone; h != nil {
		c.phase = r.phase
		info := AttemptDoneInfo{CallInfo: c.info(), Err: err, Outcome: r.outcome, Retryable: r.retryable, Duration: t.clock().Sub(began)}
		if resp != nil {
			info.StatusCode = resp.StatusCode
			if r.retryable {
				info.Err = statusError(resp, t.clock())
			}
		}
		emit(h, info)
	}
	return resp, r, true, err
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
	if dl, ok := c.ctx.Deadline(); ok && dl.Sub(c.t.clock()) <= d {
		return 0
	}
	return d
}

// backoff schedules the next attempt after a retryable result: it asks the
// budget, works out the delay, discards the last response and waits. When
// no retry may follow, it returns what the call returns and retry false.
func (c *call) backoff() (resp *http.Response, err error, retry bool) {
	t, p := c.t, c.p
	now := t.clock()
	retryNo := c.attempt // the coming attempt is retry number c.attempt
	d := fullJitter(backoffCeiling(p.initialBackoff, p.maxBackoff, retryNo), t.random)
	src := "backoff"
	ra, hasRA := retryAfter(c.lastResp, now)
	remaining, hasDeadline := time.Duration(0), false
	if dl, ok := c.ctx.Deadline(); ok {
		remaining, hasDeadline = dl.Sub(now), true
	}
	if hasRA {
		if ra > p.maxRetryAfter || (hasDeadline && ra >= remaining) {
			resp, err = c.stop(errRetryAfterTooLong, decide.Verdict{})
			return resp, err, false
		}
		d, src = retryAfterDelay(ra, d, p.maxRetryAfter), "retry_after"
		if hasDeadline && d >= remaining {
			d = ra
		}
	}
	if hasDeadline && d >= remaining {
		resp, err = c.stop(ErrDeadline, decide.Verdict{})
		return resp, err, false
	}
	if err := c.openThrough(now.Add(d)); err != nil {
		// The breaker would refuse the attempt after the wait: neither wait
		// nor spend a retry token for it.
		resp, err = c.stop(err, decide.Verdict{})
		return resp, err, false
	}
	if !c.allowRetry() {
		resp, err = c.stop(ErrBudgetExhausted, decide.Verdict{})
		return resp, err, false
	}
	lastErr := c.lastErr
	if c.lastResp != nil {
		lastErr = statusError(c.lastResp, now)
		if c.lastResp = keepBounded(c.lastResp, p.maxDrain, t.maxDrainTime()); c.lastResp == nil {
			c.lastErr = lastErr // too long to keep: its status stays in the error
		}
		if dl, ok := c.ctx.Deadline(); ok && d >= dl.Sub(t.clock()) {
			// Reading the body took the time the wait needed.
			resp, err = c.stop(ErrDeadline, decide.Verdict{})
			return resp, err, false
		}
	}
	if h := t.Hooks.Retry; h != nil {
		info := RetryInfo{CallInfo: c.info(), Delay: d, Source: src, Err: lastErr}
		if hasRA {
			info.RetryAfter = ra
		}
		emit(h, info)
	}
	werr := t.wait(c.ctx, d)
	if werr == nil {
		// The timer and the caller's context may end the wait together,
		// and the timer win: no attempt starts once the caller is done.
		werr = c.ctx.Err()
	}
	if werr != nil {
		c.giveUp(werr, decide.Verdict{})
		// The set-aside response is not handed back: the caller stopped
		// waiting for it. Its status stays reachable through Last.
		return nil, &RetryError{Reason: werr, Last: lastErr, Attempts: c.attempt}, false
	}
	return nil, nil, true
}

// keepBounded reads a response that is set aside for a retry, so that its
// connection returns to the pool during the wait, and keeps it to give
// back should no retry follow (the breaker refuses, the deadline nears).
// A body longer than limit is dropped with its response: nil.
//
// The read is bounded in time too, by closing the body from a timer after
// within (net/http lets a body be closed to abort a read in progress): a
// server trickling a long body cannot hold the call before its wait.
func keepBounded(resp *http.Response, limit int64, within time.Duration) *http.Response {
	if resp.Body == nil || resp.Body == http.NoBody {
		return resp
	}
	cut := time.AfterFunc(within, func() { _ = resp.Body.Close() })
	body, err := io.ReadAll(io.LimitReader(resp.Body, min(limit, math.MaxInt64-1)+1))
	cut.Stop()
	_ = resp.Body.Close()
	if err != nil || int64(len(body)) > limit {
		return nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp
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
		b.err.Store(&err)
	}
	return n, err
}

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
