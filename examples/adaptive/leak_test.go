package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when the example leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
