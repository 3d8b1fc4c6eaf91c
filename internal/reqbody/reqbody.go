// Package reqbody tells an error of the caller's request body from a
// network error: the body is watched as the base reads it, so that an
// attempt that failed because the caller's reader did is known as the
// caller's doing. A body whose reads cannot fail (one in memory) needs no
// watcher, and is handed to the base as it is.
package reqbody

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
)

// Watch returns a watcher of body, or nil when body needs none: no
// body, or one whose reads cannot fail, so that any error of the attempt is
// not the body's.
//
// Such a body (what http.NewRequest makes of a *bytes.Reader, *bytes.Buffer
// or *strings.Reader) is handed to the base as it is: net/http recognises
// it only unwrapped. It then writes the headers and the start of the body
// in one write (isKnownInMemoryReader), where a wrapped body makes it flush
// the headers first and copy the body through a buffer it allocates. A
// wrapper that passed WriteTo through would not win that back: net/http
// looks for the concrete types, and with a known length it reads the body
// through an io.LimitedReader, which hides WriteTo anyway.
func Watch(body io.ReadCloser) *Watcher {
	if body == nil || body == http.NoBody || readsCannotFail(body) {
		return nil
	}
	return &Watcher{ReadCloser: body}
}

// The types of io.NopCloser's results: one for a reader that implements
// io.WriterTo, one for any other.
var (
	nopCloserType         = reflect.TypeOf(io.NopCloser(struct{ io.Reader }{}))
	nopCloserWriterToType = reflect.TypeOf(io.NopCloser(new(bytes.Reader)))
)

// readsCannotFail reports whether body is io.NopCloser of a *bytes.Reader,
// *bytes.Buffer or *strings.Reader, whose Read returns no error but io.EOF.
func readsCannotFail(body io.ReadCloser) bool {
	return InMemory(body) != nil
}

// InMemory returns the reader inside body when body is io.NopCloser of a
// non-nil *bytes.Reader, *bytes.Buffer or *strings.Reader, and nil
// otherwise. It looks through io.NopCloser as net/http's transferWriter
// does.
func InMemory(body io.ReadCloser) io.Reader {
	switch reflect.TypeOf(body) {
	case nopCloserType, nopCloserWriterToType:
	default:
		return nil
	}
	switch r := reflect.ValueOf(body).Field(0).Interface().(type) {
	case *bytes.Reader:
		if r != nil {
			return r
		}
	case *bytes.Buffer:
		if r != nil {
			return r
		}
	case *strings.Reader:
		if r != nil {
			return r
		}
	}
	return nil
}

// Watcher remembers an error of the caller's body reader, so that it can
// be told apart from a network failure. Its Read is called by one
// goroutine at a time, as any reader's; Failed may be called from another
// while it runs.
type Watcher struct {
	io.ReadCloser
	err atomic.Pointer[error]
}

// Read reads from the body, and remembers an error other than io.EOF.
func (b *Watcher) Read(p []byte) (int, error) {
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
func (b *Watcher) fail(err error) { b.err.Store(&err) }

// Failed reports whether err comes from the body reader.
func (b *Watcher) Failed(err error) bool {
	be := b.err.Load()
	return err != nil && be != nil && errors.Is(err, *be)
}
