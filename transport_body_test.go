package retryfuse

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// failingBody gives n bytes of x, then err.
type failingBody struct {
	n   int
	err error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, b.err
	}
	k := min(len(p), b.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	b.n -= k
	return k, nil
}

func (b *failingBody) Close() error { return nil }

// A body whose reads cannot fail reaches the base as the caller gave it,
// which net/http recognises as in memory; any other is watched.
func TestInMemoryBodyReachesTheBaseUnwrapped(t *testing.T) {
	for _, tt := range []struct {
		name    string
		body    io.Reader
		unwrapd bool
	}{
		{"strings.Reader", strings.NewReader("x"), true},
		{"bytes.Reader", bytes.NewReader([]byte("x")), true},
		{"bytes.Buffer", bytes.NewBufferString("x"), true},
		{"a reader that may fail", io.MultiReader(strings.NewReader("x")), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, "http://127.0.0.1:1/orders", tt.body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(headerIdempotencyKey, "k1")
			var got io.ReadCloser
			tr := newTransport(t, newFakeClock(), &Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				got = r.Body
				_, _ = io.Copy(io.Discard, r.Body)
				_ = r.Body.Close()
				return &http.Response{StatusCode: http.StatusCreated, Body: http.NoBody, Request: r}, nil
			})})
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: got error %v, want nil", err)
			}
			_ = resp.Body.Close()
			if unwrapped := got == req.Body; unwrapped != tt.unwrapd {
				t.Errorf("the base got the caller's body itself: %v, want %v (got %T)", unwrapped, tt.unwrapd, got)
			}
		})
	}
}

// The caller's body failing half-way through a keyed POST on a real
// connection is the caller's doing: the call ends with the body's error,
// is neither repeated nor reported as an uncertain write. (A network
// failure after a body that cannot fail is sent is uncertain:
// TestKeyedPOSTResetAfterWriteRequiresReconcile.)
func TestBodyReadErrorToldApartFromNetworkError(t *testing.T) {
	errDisk := errors.New("disk gone")
	srv := newTestServer(t, failThenOK(0))
	var log hookLog
	tr := newTransport(t, newFakeClock(), &Transport{Hooks: log.hooks()})
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, srv.URL+"/orders", &failingBody{n: 8 << 10, err: errDisk})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 16 << 10
	req.GetBody = func() (io.ReadCloser, error) { return &failingBody{n: 8 << 10, err: errDisk}, nil }
	req.Header.Set(headerIdempotencyKey, "k1")
	_, _, err = do(tr, req)
	if !errors.Is(err, errDisk) {
		t.Errorf("Do: got error %v, want one matching %v", err, errDisk)
	}
	if errors.Is(err, ErrReconcileRequired) {
		t.Errorf("Do: got %v, want no reconcile error: the request was cut short by its own body", err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.dones) != 1 {
		t.Fatalf("attempts: got %d, want 1", len(log.dones))
	}
	if d := log.dones[0]; d.Retryable {
		t.Errorf("attempt: got retryable, want not (outcome %v, err %v)", d.Outcome, d.Err)
	}
}
