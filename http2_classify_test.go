package retryfuse

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"testing"

	"github.com/retryfuse/retryfuse/retryfusetest"
)

// h2PeerReset stands for net/http's unexported HTTP/2 stream error as its
// transport returns it when the server resets a stream: the same fields,
// and the same As (net/http's h2_error.go), which fills any struct of that
// shape. net/http makes no such error without a connection, and its
// transport sends a REFUSED_STREAM's request again, pausing up to 32s
// between tries, rather than return it.
type h2PeerReset struct {
	StreamID uint32
	Code     h2ErrCode
	Cause    error
}

// h2ErrCode is an HTTP/2 error code (RFC 9113, section 7).
type h2ErrCode uint32

func (e h2PeerReset) Error() string {
	return fmt.Sprintf("stream error: stream ID %d; %#x; %v", e.StreamID, uint32(e.Code), e.Cause)
}

// As fills target, a pointer to a struct of h2PeerReset's shape: its
// fields' names in order, each of a type h2PeerReset's converts to.
func (e h2PeerReset) As(target any) bool {
	dst := reflect.ValueOf(target).Elem()
	if dst.Kind() != reflect.Struct {
		return false
	}
	src := reflect.ValueOf(e)
	if dst.NumField() != src.NumField() {
		return false
	}
	for i := range src.NumField() {
		sf, df := src.Type().Field(i), dst.Type().Field(i)
		if sf.Name != df.Name || !sf.Type.ConvertibleTo(df.Type) {
			return false
		}
	}
	for i := range src.NumField() {
		dst.Field(i).Set(src.Field(i).Convert(dst.Field(i).Type()))
	}
	return true
}

// A stream the server reset, as http.Client returns it: retryable by
// default for INTERNAL_ERROR (the server gave up on it) and REFUSED_STREAM
// (the server did not process it) only.
func TestDefaultClassifyHTTP2StreamResets(t *testing.T) {
	fromPeer := errors.New("received from peer")
	for _, tt := range []struct {
		code h2ErrCode
		name string
		want Class
	}{
		{0x0, "NO_ERROR", ClassFinal},
		{0x1, "PROTOCOL_ERROR", ClassFinal},
		{0x2, "INTERNAL_ERROR", ClassRetryable},
		{0x3, "FLOW_CONTROL_ERROR", ClassFinal},
		{0x4, "SETTINGS_TIMEOUT", ClassFinal},
		{0x5, "STREAM_CLOSED", ClassFinal},
		{0x6, "FRAME_SIZE_ERROR", ClassFinal},
		{0x7, "REFUSED_STREAM", ClassRetryable},
		{0x8, "CANCEL", ClassFinal},
		{0x9, "COMPRESSION_ERROR", ClassFinal},
		{0xa, "CONNECT_ERROR", ClassFinal},
		{0xb, "ENHANCE_YOUR_CALM", ClassFinal},
		{0xc, "INADEQUATE_SECURITY", ClassFinal},
		{0xd, "HTTP_1_1_REQUIRED", ClassFinal},
	} {
		err := &url.Error{Op: "Get", URL: "https://dep.test/", Err: h2PeerReset{StreamID: 1, Code: tt.code, Cause: fromPeer}}
		if se := (retryfusetest.StreamError{}); !errors.As(err, &se) || se.Code != uint32(tt.code) {
			t.Fatalf("%s: the stream error fills %+v, want the target of the HTTP/2 fault tests with code %#x", tt.name, se, uint32(tt.code))
		}
		if got := defaultClassify(nil, err); got != tt.want {
			t.Errorf("defaultClassify(a stream reset with %s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
