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
	const problems = "type https://pkg.go.dev/github.com/retryfuse/retryfuse/idempotency#"
	want := []string{
		"POST /charges, Idempotency-Key: order-42\n" +
			`  201 {"id":"ch_1","request":{"amount":4200,"currency":"EUR"}}` + "\n" +
			"  charges applied so far: 1\n" +
			"  Idempotency-Key-Honoured: ?1\n",
		"the same POST again, same key and body\n" +
			`  201 (Idempotent-Replayed: true) {"id":"ch_1","request":{"amount":4200,"currency":"EUR"}}` + "\n" +
			"  charges applied so far: 1\n",
		"the same key, another body\n" +
			"  refused: errors.Is(err, retryfuse.ErrIdempotencyConflict)\n" +
			"  charges applied so far: 1\n",
		"a POST without a key\n" +
			"  400 Idempotency-Key is missing\n" +
			"  " + problems + "ProblemKeyMissing\n" +
			"  charges applied so far: 1\n",
		"Idempotency-Key: order-43 again while its first request runs\n" +
			"  409 from the middleware, 1 time(s); retryfuse waited its Retry-After and sent it again\n" +
			" then\n" +
			`  201 (Idempotent-Replayed: true) {"id":"ch_2","request":{"amount":4200,"currency":"EUR"}}` + "\n" +
			"  charges applied so far: 2\n",
	}
	if got := out.String(); got != strings.Join(want, "") {
		t.Errorf("output:\n%s\nwant:\n%s", got, strings.Join(want, ""))
	}
}
