package retryfusetest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"
)

// Handler is an http.Handler that makes each request meet the next fault
// of its script before, around or after the handler it wraps, inside a
// server: mounted in a user's own server, or placed inside a middleware
// (the idempotency middleware, say) to crash between the effect and the
// middleware's record of it. Where the server cannot reset a connection
// itself it crashes as a handler does: it panics with
// http.ErrAbortHandler, which a net/http server answers by dropping the
// connection (HTTP/1) or resetting the stream (HTTP/2), a middleware
// between sees as a panic, and a Transport as a closed connection. A
// stall holds the request until its client goes. The wrapped handler's
// response is buffered before it is delivered (its trailers and flushes
// are not kept).
//
// This type is concurrency safe.
type Handler struct {
	handler http.Handler
	script  *script
	wire    bool          // a Server's: reset and close the connection itself
	done    chan struct{} // a Server's: closed when it closes; nil otherwise
}

// NewHandler returns a Handler around h (nil: 200 OK, an empty body),
// each request meeting the next of faults in order and Answer once they
// are spent.
func NewHandler(h http.Handler, faults ...Fault) *Handler {
	if h == nil {
		h = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	}
	return &Handler{handler: h, script: newScript(faults)}
}

// Met returns the faults the requests met so far, one per request, in
// order (Answer for those past the script).
func (h *Handler) Met() []Fault { return h.script.met() }

// Requests returns how many requests reached the Handler.
func (h *Handler) Requests() int { return len(h.script.met()) }

// crash ends the request as a handler that crashed.
func (*Handler) crash() { panic(http.ErrAbortHandler) }

// reset resets the connection, on a Server's wire, or crashes.
func (h *Handler) reset(w http.ResponseWriter) {
	if !h.wire {
		h.crash()
	}
	resetConn(w)
}

// close closes the connection in order, on a Server's wire, or crashes.
func (h *Handler) close(w http.ResponseWriter) {
	if !h.wire {
		h.crash()
	}
	closeConn(w)
}

// ServeHTTP serves r with the next fault of the script.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := h.script.next()
	switch f.kind {
	case refuse, resetBeforeRead:
		h.reset(w)
		return
	case streamReset:
		panic(http.ErrAbortHandler) // HTTP/2: RST_STREAM; HTTP/1: the connection closed
	case stallBeforeApply:
		h.stall(r)
		h.crash() // nothing is delivered
	case plainStatus, retryAfterSeconds, retryAfterDate:
		if err := f.statusError(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if f.kind != plainStatus {
			w.Header().Set("Retry-After", f.retryAfterValue(time.Now()))
		}
		w.WriteHeader(f.status)
		return
	}
	rec := httptest.NewRecorder()
	h.handler.ServeHTTP(rec, r) // a panic goes on to net/http, which drops the connection
	switch f.kind {
	case applyThenReset:
		h.reset(w)
		return
	case applyThenClose:
		h.close(w)
		return
	case applyThenStall:
		h.stall(r)
		h.crash() // the response is never delivered
	}
	body := rec.Body.Bytes()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	if f.kind == slowBody || f.kind == truncatedBody {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(rec.Code)
	switch f.kind {
	case slowBody:
		h.writeSlowly(w, r, body, f.after)
	case truncatedBody:
		if f.n < len(body) {
			_, _ = w.Write(body[:f.n])
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler) // the body ends before its length
		}
		_, _ = w.Write(body)
	default:
		_, _ = w.Write(body)
	}
}

// stall holds r until its client goes or the server closes.
func (h *Handler) stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-h.done:
	}
}

// writeSlowly writes body one byte per interval every.
func (h *Handler) writeSlowly(w http.ResponseWriter, r *http.Request, body []byte, every time.Duration) {
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for i := range body {
		timer := time.NewTimer(every)
		select {
		case <-r.Context().Done():
			timer.Stop()
			return
		case <-h.done:
			timer.Stop()
			return
		case <-timer.C:
		}
		if _, err := w.Write(body[i : i+1]); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}
