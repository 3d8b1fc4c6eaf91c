package retryfuse_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/retryfuse/retryfuse"
	"github.com/retryfuse/retryfuse/ledger"
)

// A platform calls a payments API for its merchants, under one API key
// and one Ledger: the merchant's header is named among the credentials,
// so that one merchant's call is never answered with another's stored
// response under the same key.
func ExampleCredentials() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "refund for ", r.Header.Get("Stripe-Account"))
	}))
	defer srv.Close()

	tr := &retryfuse.Transport{Keys: retryfuse.KeyPolicy{
		Ledger:      &ledger.Memory{},
		Credentials: retryfuse.Credentials{Headers: []string{"Authorization", "Stripe-Account"}},
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	refund := func(account string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/refunds", strings.NewReader("charge=ch_1"))
		req.Header.Set("Authorization", "Bearer sk_platform")
		req.Header.Set("Stripe-Account", account)
		req.Header.Set("Idempotency-Key", "order-123-refund")
		resp, err := client.Do(req)
		var conflict *retryfuse.KeyConflictError
		switch {
		case errors.As(err, &conflict):
			fmt.Printf("%s: refused, nothing sent (credentials compared: %v)\n", account, conflict.Credentials)
		case err != nil:
			fmt.Println(account, err)
		default:
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Printf("%s: %d %s\n", account, resp.StatusCode, body)
		}
	}
	refund("acct_A")
	refund("acct_A") // answered from the Ledger
	refund("acct_B") // another merchant, the same key
	// Output:
	// acct_A: 201 refund for acct_A
	// acct_A: 201 refund for acct_A
	// acct_B: refused, nothing sent (credentials compared: true)
}
