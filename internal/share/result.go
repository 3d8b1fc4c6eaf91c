package share

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
)

// This file is a shared call's result: its body read once, up to a bound,
// and each caller's copy of it; or, over the bound, the stream left to the
// caller who started it.

// DefaultMaxBody is the default bound of a body read to be shared
// (ReadPolicy.MaxSharedBody).
const DefaultMaxBody = 1 << 20

// Result is the outcome of a shared call, as each caller copies it. It is
// written once, before the flight's callers are woken, and only read
// after (but for the stream, which Flights.Wait hands to the leader).
type Result struct {
	// Err is the shared call's error.
	Err error
	// GaveUp is why the call gave up, for the Fallback's mark.
	GaveUp error
	// Panicked is the value the shared call panicked with, to be raised
	// again on each caller's goroutine; nil when it did not panic.
	Panicked any

	resp     *http.Response // the response's status and headers; its Body is not read
	body     []byte
	bodyErr  error // the error that cut the body short, after body
	stream   *http.Response
	tooLarge bool // the body was over the bound: stream, for the leader
}

// Collect reads resp's body, up to limit bytes, for every caller of f to
// copy. A longer body (or a switch of protocols) is left as a stream for
// the leader alone, to read on; closing it ends f's context. It does not
// set GaveUp.
func (f *Flight) Collect(resp *http.Response, err error, limit int64) Result {
	if resp == nil {
		return Result{Err: err}
	}
	res := Result{resp: resp, Err: err}
	if resp.Body == nil || resp.Body == http.NoBody {
		return res
	}
	if _, rw := resp.Body.(io.Writer); rw || resp.ContentLength > limit || resp.StatusCode == http.StatusSwitchingProtocols {
		res.tooLarge, res.stream = true, streamOf(resp, nil, f.cancel)
		return res
	}
	var buf bytes.Buffer
	if resp.ContentLength > 0 {
		// A length the server declares is room made at once, but no more
		// than maxGrow: past it the buffer grows as the bytes arrive, so a
		// length that lies under a large bound costs at most maxGrow
		// unsent. The room ReadFrom wants free for its last read (the
		// one that meets the end) is made with it, or a body that fills
		// its length would be copied into a buffer twice its size.
		buf.Grow(int(min(resp.ContentLength, maxGrow)) + bytes.MinRead)
	}
	// One byte past the bound tells a body over it; math.MaxInt64 (no
	// bound) has no byte past it, and limit+1 would overflow to none.
	_, rerr := buf.ReadFrom(io.LimitReader(resp.Body, min(limit, math.MaxInt64-1)+1))
	if int64(buf.Len()) > limit {
		res.tooLarge, res.stream = true, streamOf(resp, buf.Bytes(), f.cancel)
		return res
	}
	_ = resp.Body.Close()
	res.body, res.bodyErr = buf.Bytes(), rerr
	return res
}

// maxGrow is the most room made at once for a body of declared length.
const maxGrow = 1 << 20

// streamOf returns resp with its body read from read first, then from
// its body; closing it closes the body and calls cancel.
func streamOf(resp *http.Response, read []byte, cancel context.CancelFunc) *http.Response {
	body := resp.Body
	resp.Body = &streamBody{Reader: io.MultiReader(bytes.NewReader(read), body), body: body, cancel: cancel}
	return resp
}

// streamBody is a body too large to share, as its one reader reads it.
type streamBody struct {
	io.Reader
	body   io.Closer
	cancel context.CancelFunc
}

// Close closes the body and ends the shared call's context.
func (b *streamBody) Close() error {
	err := b.body.Close()
	b.cancel()
	return err
}

// For returns the response of one caller of the shared call, for req,
// given the stream Flights.Wait handed it: none when the call failed
// (Err), the stream when the caller has it, else a copy of its own. It
// reports false when the body was over the bound and the caller has no
// stream: the caller then makes a call of its own.
func (r *Result) For(req *http.Request, stream *http.Response) (*http.Response, bool) {
	switch {
	case r.Err != nil:
		return nil, true
	case r.tooLarge && stream == nil:
		return nil, false
	case stream != nil:
		stream.Request = req
		return stream, true
	}
	return r.copyFor(req), true
}

// copyFor returns a copy of the shared response for req: its status, a
// copy of its headers and trailers, and a body of its own.
func (r *Result) copyFor(req *http.Request) *http.Response {
	if r.resp == nil {
		return nil
	}
	resp := new(http.Response)
	*resp = *r.resp
	resp.Header = r.resp.Header.Clone()
	resp.Trailer = r.resp.Trailer.Clone()
	resp.Request = req
	switch {
	case r.resp.Body == nil:
	case r.body == nil && r.bodyErr == nil:
		resp.Body = http.NoBody
	case r.bodyErr != nil:
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(r.body), errReader{r.bodyErr}))
	default:
		resp.Body = io.NopCloser(bytes.NewReader(r.body))
	}
	return resp
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// BodyError says why a caller made a call of its own: the shared
// response's body was over the bound, Limit bytes.
type BodyError struct{ Limit int64 }

// Error names the bound.
func (e *BodyError) Error() string {
	return "retryfuse: shared response body over MaxSharedBody (" + strconv.FormatInt(e.Limit, 10) + " bytes): each waiting caller makes its own call"
}
