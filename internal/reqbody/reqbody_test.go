package reqbody

import (
	"bytes"
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

func TestWatchBodyOnlyWhereAReadCanFail(t *testing.T) {
	tests := []struct {
		name  string
		body  io.ReadCloser
		watch bool
	}{
		{"nil", nil, false},
		{"NoBody", http.NoBody, false},
		{"bytes.Reader", io.NopCloser(bytes.NewReader([]byte("x"))), false},
		{"bytes.Buffer", io.NopCloser(bytes.NewBufferString("x")), false},
		{"strings.Reader", io.NopCloser(strings.NewReader("x")), false},
		{"NopCloser of nil", io.NopCloser(nil), true},
		{"NopCloser of a nil *bytes.Reader", io.NopCloser((*bytes.Reader)(nil)), true},
		{"NopCloser of another reader", io.NopCloser(&failingBody{err: io.ErrUnexpectedEOF}), true},
		{"NopCloser of a LimitedReader", io.NopCloser(io.LimitReader(strings.NewReader("x"), 1)), true},
		{"a ReadCloser of its own", &failingBody{err: io.ErrUnexpectedEOF}, true},
		{"a ReadCloser wrapping bytes.Reader", struct{ io.ReadCloser }{io.NopCloser(bytes.NewReader(nil))}, true},
	}
	for _, tt := range tests {
		w := Watch(tt.body)
		if got := w != nil; got != tt.watch {
			t.Errorf("%s: watched %v, want %v", tt.name, got, tt.watch)
		}
		if w != nil && w.ReadCloser != tt.body {
			t.Errorf("%s: the watcher wraps %v, want the body itself", tt.name, w.ReadCloser)
		}
	}
}
