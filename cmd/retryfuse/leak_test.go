package main

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves a goroutine behind (the demo's
// servers and transports, above all). Nothing is ignored. It also removes
// the binary that TestBinaryFixtures built.
func TestMain(m *testing.M) {
	code := m.Run()
	removeBinary()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}
