package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves a goroutine behind (the demo's
// servers and transports, above all). Nothing is ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
