package evidence

import (
	"fmt"
	"testing"
)

// h2FakeStreamError stands for net/http's unexported HTTP/2 stream error,
// whose As method fills any struct of the same shape, as this one's does.
type h2FakeStreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (e h2FakeStreamError) Error() string { return "stream error" }

func (e h2FakeStreamError) As(target any) bool {
	if p, ok := target.(*h2StreamError); ok {
		*p = h2StreamError(e)
		return true
	}
	return false
}

// An HTTP/2 stream reset is transient for INTERNAL_ERROR and REFUSED_STREAM
// only.
func TestHTTP2StreamResetCodes(t *testing.T) {
	for _, tt := range []struct {
		code uint32
		want bool // transient: retryable by default
	}{
		{0x2, true},  // INTERNAL_ERROR
		{0x7, true},  // REFUSED_STREAM
		{0x1, false}, // PROTOCOL_ERROR
		{0x3, false}, // FLOW_CONTROL_ERROR
		{0xb, false}, // ENHANCE_YOUR_CALM
		{0xd, false}, // HTTP_1_1_REQUIRED
	} {
		err := fmt.Errorf("round trip: %w", h2FakeStreamError{StreamID: 3, Code: tt.code})
		if got := Transient(err); got != tt.want {
			t.Errorf("stream reset code %#x: got transient %v, want %v", tt.code, got, tt.want)
		}
	}
}
