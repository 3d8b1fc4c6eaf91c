package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	const body = `body {"amount":4200,"currency":"EUR"}`
	for _, want := range []string{
		`transport: attempt 1: retryfuse: retryable status 503 Service Unavailable; repeating with key "order-42"`,
		`server: request 1: key "order-42", ` + body,
		`server: request 2: key "order-42", ` + body,
		"client: status 201; the server received 2 request(s)",
		`server: request 1: key "", ` + body,
		"gave up after attempt 1 (status 503): retryfuse: request is not repeatable",
		"client: status 503; the server received 1 request(s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
