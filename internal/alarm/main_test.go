package alarm

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves a goroutine behind: an alarm
// stopped before it fired must not leave its sleeper running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
