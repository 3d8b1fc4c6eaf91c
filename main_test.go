package retryfuse

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves a goroutine behind: a leaked
// attempt timer, response body or connection would show up here. Nothing is
// ignored; each test closes its servers and its Transport's idle
// connections.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
