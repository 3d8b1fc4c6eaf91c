package retryfuse

import (
	"errors"
	"io"
	"sync/atomic"
)

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
