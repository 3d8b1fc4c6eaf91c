package retryfusetest

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// A Fault is what happens to one request: answered normally, or one of
// the failures a client of a remote dependency meets. A request that
// reaches the handler has its effect applied (the handler ran); the
// others never reach it. The zero Fault is Answer.
type Fault struct {
	kind   kind
	status int           // Status, RetryAfter, RetryAfterDate
	after  time.Duration // RetryAfter, RetryAfterDate; SlowBody: the wait per byte
	n      int           // TruncatedBody: the bytes delivered
}

type kind uint8

const (
	answer kind = iota
	refuse
	resetBeforeRead
	applyThenReset
	applyThenClose
	stallBeforeApply
	applyThenStall
	plainStatus
	retryAfterSeconds
	retryAfterDate
	slowBody
	truncatedBody
	streamReset
)

var kindNames = [...]string{
	answer:            "Answer",
	refuse:            "Refuse",
	resetBeforeRead:   "ResetBeforeRead",
	applyThenReset:    "ApplyThenReset",
	applyThenClose:    "ApplyThenClose",
	stallBeforeApply:  "StallBeforeApply",
	applyThenStall:    "ApplyThenStall",
	plainStatus:       "Status",
	retryAfterSeconds: "RetryAfter",
	retryAfterDate:    "RetryAfterDate",
	slowBody:          "SlowBody",
	truncatedBody:     "TruncatedBody",
	streamReset:       "StreamReset",
}

// String names the fault as its constructor does.
func (f Fault) String() string {
	s := kindNames[f.kind]
	switch f.kind {
	case retryAfterSeconds, retryAfterDate:
		return s + "(" + strconv.Itoa(f.status) + ", " + f.after.String() + ")"
	case plainStatus:
		return s + "(" + strconv.Itoa(f.status) + ")"
	case slowBody:
		return s + "(" + f.after.String() + ")"
	case truncatedBody:
		return s + "(" + strconv.Itoa(f.n) + ")"
	}
	return s + "()"
}

// Applies reports whether the request reaches the handler: its effect is
// applied, whatever the client then sees.
func (f Fault) Applies() bool {
	switch f.kind {
	case answer, applyThenReset, applyThenClose, applyThenStall, slowBody, truncatedBody:
		return true
	}
	return false
}

// Answer runs the handler and delivers its response.
func Answer() Fault { return Fault{} }

// Refuse refuses the connection: nothing of the request leaves the
// client (the phase is pre_write), as when nothing listens on the port.
// A Server, which has already accepted the connection, cannot refuse it:
// it resets it before reading the request, as ResetBeforeRead.
func Refuse() Fault { return Fault{kind: refuse} }

// ResetBeforeRead resets the connection after the client wrote the
// request and before the server read it: nothing is applied, but the
// client cannot know that (the phase is post_write). On HTTP/2 it resets
// the request's stream instead (RST_STREAM, INTERNAL_ERROR).
func ResetBeforeRead() Fault { return Fault{kind: resetBeforeRead} }

// ApplyThenReset runs the handler, drops its response and resets the
// connection: the effect is committed and the response lost, the fault a
// keyed write must be reconciled after. On HTTP/2 it resets the stream.
func ApplyThenReset() Fault { return Fault{kind: applyThenReset} }

// ApplyThenClose runs the handler, drops its response and closes the
// connection in order (a FIN, which the client reads as io.EOF). On
// HTTP/2 it resets the stream.
func ApplyThenClose() Fault { return Fault{kind: applyThenClose} }

// StallBeforeApply holds the request without reading it until the client
// gives up (its context ends) or the server closes: nothing is applied.
func StallBeforeApply() Fault { return Fault{kind: stallBeforeApply} }

// ApplyThenStall runs the handler and then holds its response until the
// client gives up or the server closes: the effect is applied, and the
// client times out after writing.
func ApplyThenStall() Fault { return Fault{kind: applyThenStall} }

// Status answers code with an empty body and no Retry-After, without
// running the handler: a 503 or 502 from a load balancer in front of the
// server, a 500, a 429 that names no wait. A code outside 100 to 999
// makes the request fail with an error that says so.
func Status(code int) Fault { return Fault{kind: plainStatus, status: code} }

// RetryAfter answers status (429 or 503, say) with a Retry-After header
// of d in whole seconds, rounded up, without running the handler. A status
// outside 100 to 999 makes the request fail with an error that says so.
func RetryAfter(status int, d time.Duration) Fault {
	return Fault{kind: retryAfterSeconds, status: status, after: d}
}

// RetryAfterDate answers status with a Retry-After header holding the
// HTTP date d after the answer (in the server's time: a testing/synctest
// bubble's, inside one), without running the handler.
func RetryAfterDate(status int, d time.Duration) Fault {
	return Fault{kind: retryAfterDate, status: status, after: d}
}

// SlowBody runs the handler and delivers its status and headers at once,
// then its body one byte per interval every.
func SlowBody(every time.Duration) Fault { return Fault{kind: slowBody, after: every} }

// TruncatedBody runs the handler and delivers its status and headers,
// with the full Content-Length, and then only the first n bytes of its
// body before the connection fails: the client reads
// io.ErrUnexpectedEOF.
func TruncatedBody(n int) Fault { return Fault{kind: truncatedBody, n: max(n, 0)} }

// StreamReset resets the request's HTTP/2 stream with INTERNAL_ERROR
// before the handler runs, as a Go server does when a handler aborts. The
// Transport returns the error net/http's HTTP/2 client returns; on an
// HTTP/1 Server it closes the connection.
func StreamReset() Fault { return Fault{kind: streamReset} }

// statusError reports a status that Status, RetryAfter or RetryAfterDate was given
// and that no server can send (net/http panics on it).
func (f Fault) statusError() error {
	if f.status < 100 || f.status > 999 {
		return fmt.Errorf("retryfusetest: %v: status %d is not an HTTP status (100 to 999)", f, f.status)
	}
	return nil
}

// retryAfterValue is the Retry-After header of f, answered at now.
func (f Fault) retryAfterValue(now time.Time) string {
	if f.kind == retryAfterDate {
		// A date has whole seconds: rounded up, the wait is never short.
		at := now.Add(f.after)
		if at.Nanosecond() != 0 {
			at = at.Truncate(time.Second).Add(time.Second)
		}
		return at.UTC().Format(http.TimeFormat)
	}
	secs := (f.after + time.Second - 1) / time.Second
	return strconv.FormatInt(int64(max(secs, 0)), 10)
}

// script is the faults in the order requests meet them; Answer after the
// last. This type is concurrency safe.
type script struct {
	mu     sync.Mutex
	faults []Fault
	seen   []Fault
}

func newScript(faults []Fault) *script {
	return &script{faults: append([]Fault(nil), faults...)}
}

// next returns the fault of the next request.
func (s *script) next() Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	var f Fault
	if len(s.seen) < len(s.faults) {
		f = s.faults[len(s.seen)]
	}
	s.seen = append(s.seen, f)
	return f
}

// met returns the faults requests have met so far, in order.
func (s *script) met() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Fault(nil), s.seen...)
}
