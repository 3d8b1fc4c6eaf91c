package retryfusetest

import (
	"errors"
	"net"
	"os"
	"reflect"
	"syscall"
	"time"
)

// The errors and the connection a Transport shows its client: the same
// values net/http's Transport returns for the same faults on a real wire,
// so that a client classifies them as it would those.

// refused is the error of a refused connection to addr.
func refused(addr string) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: tcpAddr(addr), Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// reset is the error of a connection to addr reset by the server.
func reset(addr string) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: clientAddr, Addr: tcpAddr(addr), Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// StreamError is the error of an HTTP/2 stream the server reset: it has
// the fields of net/http's HTTP/2 stream error and, like that error,
// fills any struct of the same shape through errors.As, so that a client
// that recognises net/http's recognises it. Code is the HTTP/2 error code
// (2, INTERNAL_ERROR, for StreamReset).
type StreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (e StreamError) Error() string {
	code := "INTERNAL_ERROR"
	if e.Code != 2 {
		code = "error code " + itoa(uint64(e.Code))
	}
	return "stream error: stream ID " + itoa(uint64(e.StreamID)) + "; " + code + "; received from peer"
}

// As fills target when it points to a struct with StreamError's fields,
// as net/http's HTTP/2 stream error does.
func (e StreamError) As(target any) bool {
	dst := reflect.ValueOf(target)
	if dst.Kind() != reflect.Pointer || dst.IsNil() {
		return false
	}
	dst = dst.Elem()
	src := reflect.ValueOf(e)
	if dst.Kind() != reflect.Struct || dst.NumField() != src.NumField() || dst.Type() == src.Type() {
		return false
	}
	for i := range src.NumField() {
		sf, df := src.Type().Field(i), dst.Type().Field(i)
		if sf.Name != df.Name || !sf.Type.ConvertibleTo(df.Type) || !dst.Field(i).CanSet() {
			return false
		}
	}
	for i := range src.NumField() {
		dst.Field(i).Set(src.Field(i).Convert(dst.Type().Field(i).Type))
	}
	return true
}

func itoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}

// errClosedConn is what a memConn answers to reads and writes: it carries
// no bytes; the Transport hands the request to the handler itself.
var errClosedConn = errors.New("retryfusetest: in-memory connection carries no bytes")

// memConn is the connection a Transport reports to httptrace's GotConn.
type memConn struct{ remote net.Addr }

func (memConn) Read([]byte) (int, error)         { return 0, errClosedConn }
func (memConn) Write([]byte) (int, error)        { return 0, errClosedConn }
func (memConn) Close() error                     { return nil }
func (memConn) LocalAddr() net.Addr              { return clientAddr }
func (c memConn) RemoteAddr() net.Addr           { return c.remote }
func (memConn) SetDeadline(time.Time) error      { return nil }
func (memConn) SetReadDeadline(time.Time) error  { return nil }
func (memConn) SetWriteDeadline(time.Time) error { return nil }

// clientAddr is the client's end of every in-memory connection (TEST-NET-1).
var clientAddr = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}

// tcpAddr is addr ("host:port") as a net.Addr.
func tcpAddr(addr string) net.Addr { return hostAddr(addr) }

// hostAddr is a net.Addr naming a host and port that may not resolve.
type hostAddr string

func (hostAddr) Network() string  { return "tcp" }
func (a hostAddr) String() string { return string(a) }
