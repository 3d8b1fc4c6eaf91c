package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestRun plays the example against its own loopback API: both ways of
// reconciling must find the order applied once, and say so.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(&out) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: got %v, want nil; output:\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not finish within 10s")
	}
	got := out.String()
	for _, want := range []string{
		"client: no response after 1 attempt (phase post_write)",
		"client: POST again under the same key: refused without sending",
		"client: the order exists: {\"id\":\"ord-1\"",
		"effects applied for checkout-1001: 1",
		"reconciler: applied",
		"client: got 200 OK {\"id\":\"ord-2\"",
		"effects applied for checkout-1002: 1",
		"orders applied in all: 2",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q; got:\n%s", want, got)
		}
	}
}
