package ledger_test

import (
	"context"
	"crypto/sha256"
	"errors"
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

// An operator settles a key left uncertain (the call timed out after
// sending) once the other side's records say what happened: Lookup shows
// the state and its version, Settle acts only on that version.
func ExampleMemory_Settle() {
	l := &ledger.Memory{}
	ctx := context.Background()
	fp := sha256.Sum256([]byte(`POST /v1/transfers {"amount":100}`))

	claim, _ := l.Begin(ctx, "transfer-7", fp)
	_ = l.Uncertain(ctx, "transfer-7", claim.Token) // the outcome was lost

	seen, _ := l.Lookup(ctx, "transfer-7")
	fmt.Println("stuck:", seen.State)

	// The bank's statement shows the transfer: record it as applied, with
	// the response a repeat should get.
	after, err := l.Settle(ctx, "transfer-7", seen.Version, ledger.Settlement{
		Outcome: ledger.Applied,
		Stored:  &ledger.StoredResponse{StatusCode: http.StatusCreated, Body: []byte(`{"id":"tr_7"}`)},
	})
	fmt.Println("settled:", after.State, after.StoredStatus, err)

	// A second operator who saw the same version and decided otherwise is
	// refused, and told what the key is now.
	_, err = l.Settle(ctx, "transfer-7", seen.Version, ledger.Settlement{Outcome: ledger.NotApplied})
	var refused *ledger.SettleRefusedError
	fmt.Println("second operator refused:", errors.As(err, &refused), refused.Found.State)

	repeat, _ := l.Begin(ctx, "transfer-7", fp)
	fmt.Println("a repeat:", repeat.State, string(repeat.Stored.Body))
	// Output:
	// stuck: uncertain
	// settled: completed 201 <nil>
	// second operator refused: true completed
	// a repeat: completed {"id":"tr_7"}
}
