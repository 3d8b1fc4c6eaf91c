package ledger_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"

	"github.com/retryfuse/retryfuse/ledger"
)

// A ledger answers, per idempotency key: send (you own the key), wait (a
// duplicate is in flight), replay (a stored result exists) or refuse (the key
// was used with another body).
func ExampleMemory() {
	l := &ledger.Memory{} // 10,000 keys, 24 h
	ctx := context.Background()
	// The Transport fingerprints the method, path and body; any digest
	// that tells two requests apart will do here.
	fingerprint := func(body string) ledger.Fingerprint {
		return sha256.Sum256([]byte("POST /v1/charges " + body))
	}
	fp := fingerprint(`{"amount":100}`)

	claim, _ := l.Begin(ctx, "order-42", fp)
	fmt.Println("first call:", claim.State)

	dup, _ := l.Begin(ctx, "order-42", fp)
	fmt.Println("concurrent duplicate:", dup.State)

	// The first call got a confirmed response.
	_ = l.Complete(ctx, "order-42", claim.Token, &ledger.StoredResponse{
		StatusCode: http.StatusCreated,
		Body:       []byte(`{"id":"ch_1"}`),
	})

	again, _ := l.Begin(ctx, "order-42", fp)
	fmt.Println("later call:", again.State, again.Stored.StatusCode, string(again.Stored.Body))

	other, _ := l.Begin(ctx, "order-42", fingerprint(`{"amount":999}`))
	fmt.Println("another body:", other.State)
	// Output:
	// first call: none
	// concurrent duplicate: in_flight
	// later call: completed 201 {"id":"ch_1"}
	// another body: conflict
}
