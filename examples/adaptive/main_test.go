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
		"learnt limit: 4 -> 8 (growth)",
		"(latency)",
		"(*BulkheadFullError, matches ErrDeclined: true)",
		// The slowest answer is printed, not asserted: a wall-clock
		// figure on a shared machine is no test.
		"slowest answer: ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
