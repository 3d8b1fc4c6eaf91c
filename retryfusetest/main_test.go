package retryfusetest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves a goroutine behind: the kit
// starts none that outlives a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
