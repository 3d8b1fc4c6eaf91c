package browser

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves a goroutine behind: the
// browser's, the page's or a Transport's.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
