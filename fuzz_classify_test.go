package retryfuse

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/retryfuse/retryfuse/decide"
	"github.com/retryfuse/retryfuse/internal/evidence"
)

// leafKind is what the classification promises about an error leaf.
type leafKind uint8

const (
	leafTransient leafKind = iota // an errno or EOF that errors.Is finds through any wrapping
	leafCanceled
	leafCert
	leafDNSNotFound
	leafDNSTransient
	leafTimeoutish // a net.Error timeout: found or not depending on the layers above it
	leafPlain      // known to be neither transient nor a timeout
)

type errLeaf struct {
	err  error
	kind leafKind
}

var errLeaves = []errLeaf{
	{syscall.ECONNREFUSED, leafTransient},
	{syscall.ECONNRESET, leafTransient},
	{syscall.ECONNABORTED, leafTransient},
	{syscall.EPIPE, leafTransient},
	{syscall.ETIMEDOUT, leafTransient},
	{syscall.EHOSTUNREACH, leafTransient},
	{syscall.ENETUNREACH, leafTransient},
	{io.EOF, leafTransient},
	{io.ErrUnexpectedEOF, leafTransient},
	{context.Canceled, leafCanceled},
	{x509.UnknownAuthorityError{}, leafCert},
	{x509.HostnameError{Host: "api.example.test"}, leafCert},
	{x509.CertificateInvalidError{Reason: x509.Expired}, leafCert},
	{x509.SystemRootsError{}, leafCert},
	{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, leafCert},
	{tls.AlertError(42), leafCert},
	{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, leafCert},
	{&net.DNSError{Err: "no such host", Name: "nx.test", IsNotFound: true}, leafDNSNotFound},
	{&net.DNSError{Err: "server misbehaving", Name: "x.test", IsTemporary: true}, leafDNSTransient},
	{&net.DNSError{Err: "i/o timeout", Name: "x.test", IsTimeout: true}, leafDNSTransient},
	{context.DeadlineExceeded, leafTimeoutish},
	{os.ErrDeadlineExceeded, leafTimeoutish},
	{timeoutErr{}, leafTimeoutish},
	{errors.New("unsupported protocol scheme"), leafPlain},
	{syscall.EACCES, leafPlain},
	{http.ErrSchemeMismatch, leafPlain},
}

// errChain builds an error chain from fuzz bytes: the first byte picks a
// leaf, each following byte wraps it in a layer (some layers join another
// leaf, picked by the byte after). It returns the chain and its leaves.
func errChain(data []byte) (error, []errLeaf) {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	leaf := func() errLeaf { return errLeaves[int(next())%len(errLeaves)] }
	first := leaf()
	err, leaves := first.err, []errLeaf{first}
	for depth := 0; len(data) > 0 && depth < 16; depth++ {
		switch next() % 9 {
		case 0:
			err = &net.OpError{Op: "read", Net: "tcp", Err: err}
		case 1:
			err = &url.Error{Op: "Post", URL: "http://api.example.test/", Err: err}
		case 2:
			err = fmt.Errorf("layer: %w", err)
		case 3:
			err = os.NewSyscallError("read", err)
		case 4:
			l := leaf()
			err, leaves = errors.Join(err, l.err), append(leaves, l)
		case 5:
			l := leaf()
			err, leaves = fmt.Errorf("%w, then %w", l.err, err), append(leaves, l)
		case 6:
			err = &RetryError{Reason: ErrAttemptsExhausted, Last: err, Attempts: 3}
		case 7:
			err = &attemptTimeoutError{after: time.Second, err: err}
		case 8:
			err = fmt.Errorf("opaque: %v", err) // %v: the chain ends here
			leaves = []errLeaf{{err, leafPlain}}
		}
	}
	return err, leaves
}

func hasKind(leaves []errLeaf, kinds ...leafKind) bool {
	for _, l := range leaves {
		for _, k := range kinds {
			if l.kind == k {
				return true
			}
		}
	}
	return false
}

// FuzzClassify checks defaultClassify and classify for any status code and
// any error chain built from wrapping layers (net.OpError, url.Error, %w,
// os.SyscallError, errors.Join, RetryError, the attempt timeout) around
// errnos, EOF, context, TLS and x509, and DNS errors: the result is always
// ClassRetryable or ClassFinal and the same twice; a status is retryable
// exactly when retryableStatus says so (408, 425, 429, 500, 502, 503, 504);
// a cancellation or a certificate error is never retried unless the
// transport's own attempt timer cut the attempt; a chain whose only
// failures are transient is retried, one with nothing transient in it is
// not; a panicking Classifier counts as the default; the caller's own
// cancellation and body errors are never retried; and an error after the
// request may have been written is never a definite failure, so that the
// decision core never replays a written POST, key or no key.
func FuzzClassify(f *testing.F) {
	f.Add(503, []byte{1, 0, 3, 1}, uint8(2), false, false)      // ECONNRESET in SyscallError, OpError, url.Error
	f.Add(200, []byte{9, 1}, uint8(1), false, false)            // context.Canceled in url.Error
	f.Add(999, []byte{14, 4, 7, 2}, uint8(0), false, false)     // certificate error joined with EOF
	f.Add(-1, []byte{20, 7, 0}, uint8(2), true, false)          // deadline, cut by the attempt timer
	f.Add(1<<40, []byte{17, 5, 0, 6, 1}, uint8(3), false, true) // DNS not found beside ECONNREFUSED
	f.Fuzz(func(t *testing.T, code int, data []byte, phaseByte uint8, callerDone, bodyErr bool) {
		resp := &http.Response{StatusCode: code}
		cls := defaultClassify(resp, nil)
		want := ClassFinal
		switch code {
		case 408, 425, 429, 500, 502, 503, 504:
			want = ClassRetryable
		}
		if cls != want || evidence.RetryableStatus(code) != (want == ClassRetryable) {
			t.Fatalf("defaultClassify(status %d) = %v, want %v", code, cls, want)
		}
		phase := decide.Phase(phaseByte % 4)
		r := classify(nil, resp, nil, phase, callerDone, bodyErr)
		if r.phase != decide.PhasePostWrite || r.retryable != (want == ClassRetryable) ||
			r.outcome != map[bool]decide.Outcome{true: decide.OutcomeFailure, false: decide.OutcomeSuccess}[r.retryable] {
			t.Fatalf("classify(status %d) = %+v", code, r)
		}

		err, leaves := errChain(data)
		err2, _ := errChain(data)
		c := defaultClassify(nil, err)
		if c != ClassRetryable && c != ClassFinal {
			t.Fatalf("defaultClassify(%v) = %v, want ClassRetryable or ClassFinal", err, c)
		}
		if c2, c3 := defaultClassify(nil, err), defaultClassify(nil, err2); c2 != c || c3 != c {
			t.Fatalf("defaultClassify(%v) gave %v, %v, %v for the same chain", err, c, c2, c3)
		}
		cut := errors.Is(err, ErrAttemptTimeout)
		switch {
		case cut:
			if c != ClassRetryable {
				t.Fatalf("defaultClassify(%v) = %v; want an attempt cut by its timer retried", err, c)
			}
		case errors.Is(err, context.Canceled) || hasKind(leaves, leafCert):
			if c != ClassFinal {
				t.Fatalf("defaultClassify(%v) = %v; want a cancellation or certificate error final", err, c)
			}
		case hasKind(leaves, leafTransient) && !hasKind(leaves, leafDNSNotFound, leafDNSTransient):
			if c != ClassRetryable {
				t.Fatalf("defaultClassify(%v) = %v; want a transient error retried", err, c)
			}
		case !hasKind(leaves, leafTransient, leafDNSTransient, leafTimeoutish):
			if c != ClassFinal {
				t.Fatalf("defaultClassify(%v) = %v; want an error with nothing transient in it final", err, c)
			}
		}

		r = classify(nil, nil, err, phase, callerDone, bodyErr)
		panicky := classify(func(*http.Response, error) Class { panic("classifier") }, nil, err, phase, callerDone, bodyErr)
		if (callerDone || bodyErr) != (panicky.panicked == nil) {
			t.Fatalf("classify with a panicking Classifier: panicked %v, want it carried for the call to report whenever the Classifier is asked", panicky.panicked)
		}
		panicky.panicked = nil
		if panicky != r {
			t.Fatalf("classify with a panicking Classifier = %+v, want the default %+v", panicky, r)
		}
		if r.phase != phase || r.outcome == decide.OutcomeSuccess || r.outcome == 0 {
			t.Fatalf("classify(%v, phase %v) = %+v", err, phase, r)
		}
		switch {
		case callerDone || bodyErr:
			if r.retryable || !r.ignored {
				t.Fatalf("classify(%v, callerDone %v, bodyErr %v) = %+v; want not retryable, ignored", err, callerDone, bodyErr, r)
			}
		default:
			if r.retryable != (c == ClassRetryable) || r.ignored {
				t.Fatalf("classify(%v) = %+v; want retryable %v (defaultClassify), not ignored", err, r, c == ClassRetryable)
			}
		}
		if bodyErr && !callerDone {
			return // the server cannot have a complete request: a definite failure
		}
		if (phase != decide.PhasePreWrite) && r.outcome != decide.OutcomeTimeout && r.outcome != decide.OutcomeUnknown {
			t.Fatalf("classify(%v, phase %v) = %+v; want an uncertain outcome after a write", err, phase, r)
		}
		// Even a Classifier that calls everything retryable cannot make the
		// decision core replay a written POST.
		forced := classify(func(*http.Response, error) Class { return ClassRetryable }, nil, err, phase, callerDone, bodyErr)
		for _, key := range []bool{false, true} {
			v := decide.Decide(decide.Input{
				Policy:   decide.Policy{FailureThreshold: 5, BudgetUnits: 100},
				Request:  decide.Request{Method: http.MethodPost, IdempotencyKey: key, ReplayableBody: true},
				Attempts: []decide.Attempt{{Outcome: forced.outcome, Phase: forced.phase, Cost: 1}},
			})
			if (phase != decide.PhasePreWrite) && v.Decision == decide.ReplaySafe {
				t.Fatalf("Decide after a written POST (key %v) failing with %v: got %v, want no replay", key, err, v)
			}
			if !key && v.Decision == decide.ReplaySafe {
				t.Fatalf("Decide after a POST without key failing with %v: got %v, want no replay", err, v)
			}
		}
	})
}
