package retryfuse

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
)

// This file is a shared call's result (ShareReads): its body read once,
// up to MaxSharedBody, and each caller's copy of it; or, over the bound,
// the stream left to the caller who started it.

// sharedResult is the outcome of a shared call, as each caller copies it.
type sharedResult struct {
	resp     *http.Response // the response's status and headers; its Body is not read
	body     []byte
	bodyErr  error // the error that cut the body short, after body
	err      error
	gaveUp   error // why the call gave up (for the Fallback's mark)
	stream   *http.Response
	tooLarge bool // the body was over the bound: stream, for the leader
	panicked any
}

// share reads resp's body, up to MaxSharedBody, for every caller to copy.
// A longer body (or a switch of protocols) is left as a stream for the
// leader alone, to read on; cancel ends the shared call's context when it
// is closed.
func (t *Transport) share(resp *http.Response, err error, cancel context.CancelFunc) sharedResult {
	if resp == nil {
		return sharedResult{err: err}
	}
	res := sharedResult{resp: resp, err: err}
	limit := t.p.maxSharedBody
	if resp.Body == nil || resp.Body == http.NoBody {
		return res
	}
	if _, rw := resp.Body.(io.Writer); rw || resp.ContentLength > limit || resp.StatusCode == http.StatusSwitchingProtocols {
		res.tooLarge, res.stream = true, streamOf(resp, nil, cancel)
		return res
	}
	var buf bytes.Buffer
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength))
	}
	_, rerr := buf.ReadFrom(io.LimitReader(resp.Body, limit+1))
	if int64(buf.Len()) > limit {
		res.tooLarge, res.stream = true, streamOf(resp, buf.Bytes(), cancel)
		return res
	}
	_ = resp.Body.Close()
	res.body, res.bodyErr = buf.Bytes(), rerr
	return res
}

// streamOf returns resp with its body read from read first, then from
// its body; closing it closes the body and calls cancel.
func streamOf(resp *http.Response, read []byte, cancel context.CancelFunc) *http.Response {
	body := resp.Body
	resp.Body = &streamBody{Reader: io.MultiReader(bytes.NewReader(read), body), body: body, cancel: cancel}
	return resp
}

type streamBody struct {
	io.Reader
	body   io.Closer
	cancel context.CancelFunc
}

func (b *streamBody) Close() error {
	err := b.body.Close()
	b.cancel()
	return err
}

// copyFor returns a copy of the shared response for req: its status, a
// copy of its headers and trailers, and a body of its own.
func (r *sharedResult) copyFor(req *http.Request) *http.Response {
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

// sharedBodyError says why a caller made a call of its own: the shared
// response's body was over MaxSharedBody.
type sharedBodyError struct{ limit int64 }

func (e *sharedBodyError) Error() string {
	return "retryfuse: shared response body over MaxSharedBody (" + strconv.FormatInt(e.limit, 10) + " bytes): each waiting caller makes its own call"
}
