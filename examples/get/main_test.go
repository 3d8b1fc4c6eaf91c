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
	for _, want := range []string{
		"attempt 1: status 503, retryable true",
		"retry after attempt 1: waiting", "(server's Retry-After 0s, plus jitter)",
		"attempt 2: status 503, retryable true",
		"retry after attempt 2: waiting",
		"(backoff)",
		"attempt 3: status 200, retryable false",
		`client got: 200 OK "hello"`,
		"server received: 3 requests",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
