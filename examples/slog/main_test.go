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
	got := out.String()
	for _, want := range []string{
		// The first call succeeds at once: nothing at Info.
		"== GET /ok\nclient: 200 OK\n== GET /flaky\n",
		`level=INFO msg="retryfuse: retry" call_id=2 attempt=1 method=GET`,
		"delay_source=backoff status=503",
		`level=WARN msg="retryfuse: reconcile required" call_id=3 attempt=1 method=POST`,
		"phase=post_write idempotency_key=charge-7",
		`client: reconcile required for key "charge-7"`,
		"attempts counted by a second hook: 4\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "level=DEBUG") {
		t.Errorf("output has Debug records at level Info:\n%s", got)
	}
}
