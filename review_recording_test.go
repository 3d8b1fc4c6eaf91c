package retryfuse

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
)

// chanBody is a response body fed chunk by chunk; Close unblocks a Read
// in progress, as net/http's response bodies allow.
type chanBody struct {
	data   chan []byte
	closed chan struct{}
	once   sync.Once
}

func (b *chanBody) Read(p []byte) (int, error) {
	select {
	case chunk := <-b.data:
		return copy(p, chunk), nil
	case <-b.closed:
		return 0, errors.New("rv: body closed")
	}
}

func (b *chanBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// A caller may close a response body from another goroutine to abort a
// Read in progress (a watchdog, say). The body recorded for the ledger
// must allow it: under -race, this pins Close reading the recorded bytes
// while Read appends to them.
func TestRvRecordedBodyCloseConcurrentWithRead(t *testing.T) {
	ledger, err := NewMemoryLedger(MemoryLedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	body := &chanBody{data: make(chan []byte), closed: make(chan struct{})}
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 201, Header: http.Header{}, Body: body, ContentLength: -1, Request: r}, nil
	})
	tr := newTransport(t, newFakeClock(), &Transport{Base: base, Ledger: ledger})
	req := newRequest(t, testCtx(t), http.MethodPost, "http://rv.invalid/charges", `{"amount":1}`)
	req.Header.Set(HeaderIdempotencyKey, "rv-key-2")

	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.ReadAll(resp.Body)
	}()
	body.data <- []byte("partial")
	_ = resp.Body.Close() // abort the read in progress
	<-read
}
