package retryfuse_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"

	"github.com/retryfuse/retryfuse"
)

// A ledger answers, per idempotency key: send (you own the key), wait (a
// duplicate is in flight), replay (a stored result exists) or refuse (the key
// was used with another body).
func ExampleMemoryLedger() {
	ledger := &retryfuse.MemoryLedger{} // 10,000 keys, 24 h
	ctx := context.Background()
	// The Transport fingerprints the method, path and body; any digest
	// that tells two requests apart will do here.
	fingerprint := func(body string) retryfuse.Fingerprint {
		return sha256.Sum256([]byte("POST /v1/charges " + body))
	}
	fp := fingerprint(`{"amount":100}`)

	claim, _ := ledger.Begin(ctx, "order-42", fp)
	fmt.Println("first call:", claim.State)

	dup, _ := ledger.Begin(ctx, "order-42", fp)
	fmt.Println("concurrent duplicate:", dup.State)

	// The first call got a confirmed response.
	_ = ledger.Complete(ctx, "order-42", claim.Token, &retryfuse.StoredResponse{
		StatusCode: http.StatusCreated,
		Body:       []byte(`{"id":"ch_1"}`),
	})

	again, _ := ledger.Begin(ctx, "order-42", fp)
	fmt.Println("later call:", again.State, again.Stored.StatusCode, string(again.Stored.Body))

	other, _ := ledger.Begin(ctx, "order-42", fingerprint(`{"amount":999}`))
	fmt.Println("another body:", other.State)
	// Output:
	// first call: none
	// concurrent duplicate: in_flight
	// later call: completed 201 {"id":"ch_1"}
	// another body: conflict
}
