package retryfusetest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	neturl "net/url"
	"strconv"
	"time"
)

// Transport is an in-memory http.RoundTripper that hands each request to
// a handler, as a server would, and makes it meet the next fault of its
// script. It needs no socket and starts no goroutine of its own (only
// context.AfterFunc's, briefly, when a request's context ends, which ends
// with the call), so it runs inside a testing/synctest bubble, where
// stalls and slow bodies wait on the bubble's clock.
//
// It shows its client what a real wire shows: httptrace's GetConn and
// GotConn (once per request: a Transport never re-sends), WroteHeaders
// and WroteRequest once the body is read; a refused connection before
// GotConn (nothing written), a reset or a closed connection after it; the
// errors net/http returns for each. A request's body is read whole before
// the handler runs, and closed; the handler's response is buffered before
// it is delivered.
//
// The handler runs on the caller's goroutine, under a context that ends
// when the request's does. A handler that panics (http.ErrAbortHandler
// included) is recovered as a server recovers it: the client reads
// io.EOF.
//
// This type is concurrency safe.
type Transport struct {
	handler http.Handler
	script  *script
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport that serves requests with h (nil:
// 200 OK, an empty body), each meeting the next of faults in order and
// Answer once they are spent.
func NewTransport(h http.Handler, faults ...Fault) *Transport {
	if h == nil {
		h = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	}
	return &Transport{handler: h, script: newScript(faults)}
}

// Met returns the faults the requests met so far, one per request, in
// order (Answer for those past the script).
func (t *Transport) Met() []Fault { return t.script.met() }

// Requests returns how many requests reached the Transport.
func (t *Transport) Requests() int { return len(t.script.met()) }

// RoundTrip serves req, as http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	f := t.script.next()
	addr := hostPort(req)
	trace := httptrace.ContextClientTrace(ctx)
	if trace != nil && trace.GetConn != nil {
		trace.GetConn(addr)
	}
	if f.kind == refuse {
		closeBody(req)
		return nil, refused(addr)
	}
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: memConn{remote: tcpAddr(addr)}})
	}
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err // the caller's body failed: net/http returns its error as it is
		}
	}
	if trace != nil && trace.WroteHeaders != nil {
		trace.WroteHeaders()
	}
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{})
	}
	switch f.kind {
	case resetBeforeRead:
		return nil, reset(addr)
	case streamReset:
		return nil, StreamError{StreamID: 1, Code: 2}
	case stallBeforeApply:
		<-ctx.Done()
		return nil, ctx.Err()
	case plainStatus, retryAfterSeconds, retryAfterDate:
		if err := f.statusError(); err != nil {
			return nil, err
		}
		rec := httptest.NewRecorder()
		if f.kind != plainStatus {
			rec.Header().Set("Retry-After", f.retryAfterValue(time.Now()))
		}
		rec.WriteHeader(f.status)
		return response(req, rec), nil
	}
	rec, ok := t.serve(req, addr, body)
	if !ok {
		return nil, io.EOF // the handler panicked: its server closed the connection
	}
	switch f.kind {
	case applyThenReset:
		return nil, reset(addr)
	case applyThenClose:
		return nil, io.EOF
	case applyThenStall:
		<-ctx.Done()
		return nil, ctx.Err()
	}
	resp := response(req, rec)
	switch f.kind {
	case slowBody:
		resp.Body = &slowReader{ctx: ctx, data: rec.Body.Bytes(), every: f.after}
	case truncatedBody:
		all := rec.Body.Bytes()
		resp.ContentLength = int64(len(all))
		resp.Header.Set("Content-Length", strconv.Itoa(len(all)))
		resp.Body = &cutReader{data: all[:min(f.n, len(all))], short: f.n < len(all)}
	}
	return resp, nil
}

// serve runs the handler on a server's copy of req, whose body was read
// as body; ok is false when the handler panicked.
func (t *Transport) serve(req *http.Request, addr string, body []byte) (rec *httptest.ResponseRecorder, ok bool) {
	// The server's context: ended with the client's, without its values
	// (the client's trace is not the server's).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := context.AfterFunc(req.Context(), cancel)
	defer stop()

	sr := req.Clone(ctx)
	sr.Body = io.NopCloser(bytes.NewReader(body))
	sr.ContentLength = int64(len(body))
	sr.GetBody = nil
	sr.RequestURI = req.URL.RequestURI()
	sr.RemoteAddr = clientAddr.String()
	sr.Proto, sr.ProtoMajor, sr.ProtoMinor = "HTTP/1.1", 1, 1
	if sr.Host == "" {
		sr.Host = req.URL.Host
	}
	// The header as a server parses it: names canonical, whatever the
	// client's map keys (a retryfuse Transport writes Idempotency-Key
	// under a lower-case map key, so that net/http does not re-send).
	sr.Header = make(http.Header, len(req.Header))
	for k, v := range req.Header {
		ck := http.CanonicalHeaderKey(k)
		sr.Header[ck] = append(sr.Header[ck], v...)
	}
	sr.URL = &neturl.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	rec = httptest.NewRecorder()
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	t.handler.ServeHTTP(rec, sr)
	return rec, true
}

// response is rec's response to req, as a client receives it.
func response(req *http.Request, rec *httptest.ResponseRecorder) *http.Response {
	resp := rec.Result()
	resp.Request = req
	if resp.ContentLength < 0 {
		resp.ContentLength = int64(rec.Body.Len())
	}
	return resp
}

// hostPort is the host and port req is sent to.
func hostPort(req *http.Request) string {
	host, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		port = "80"
		if req.URL.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(host, port)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// slowReader delivers data one byte per interval every, or the context's
// error once it ends.
type slowReader struct {
	ctx   context.Context
	data  []byte
	every time.Duration
}

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	timer := time.NewTimer(r.every)
	defer timer.Stop()
	select {
	case <-r.ctx.Done():
		return 0, r.ctx.Err()
	case <-timer.C:
	}
	p[0], r.data = r.data[0], r.data[1:]
	return 1, nil
}

func (r *slowReader) Close() error { r.data = nil; return nil }

// cutReader delivers data, then io.ErrUnexpectedEOF when short (the body
// ended before its Content-Length), or io.EOF.
type cutReader struct {
	data  []byte
	short bool
}

func (r *cutReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		if r.short {
			return 0, io.ErrUnexpectedEOF
		}
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func (r *cutReader) Close() error { r.data, r.short = nil, false; return nil }
