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
		"attempt 1 (branch 0): GET",
		"hedge sent: branch 1",
		"attempt 2 (branch 1): GET",
		"attempt 2 (branch 1): status 200",
		"attempt 1 (branch 0): retryfuse: hedge lost: another branch answered first",
		`client got: 200 OK "hello"`,
		"server received: 2 requests, 1 cancelled by the client",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
