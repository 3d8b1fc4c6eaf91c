package retryfuse

import (
	"errors"
	"testing"
	"time"
)

// A Transport whose Base leads back to it through another Transport is
// invalid. Working out whether the base traces must not set the other
// Transport up: its setup walks back into this one's, still running, and
// sync.Once deadlocks.
func TestBaseCycleThroughAnotherTransportIsInvalid(t *testing.T) {
	a, b := &Transport{}, &Transport{}
	a.Base, b.Base = b, a
	got := make(chan error, 1)
	go func() { got <- a.Validate() }()
	select {
	case err := <-got:
		if !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("Validate: got %v, want an error wrapping ErrInvalidPolicy", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Validate did not return within 5s: setting up a cycle of Transports deadlocks")
	}
}
