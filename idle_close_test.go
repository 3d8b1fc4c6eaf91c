package retryfuse

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"
)

// A PUT sent on a keep-alive connection that the server closed while it
// lay idle gets net/http's "server closed idle connection": the server
// answered with EOF before any response. PUT is repeatable, so the call is
// repeated on a new connection. (net/http re-sends only GET, HEAD, OPTIONS
// and TRACE by itself in this case.)
func TestPUTOnConnectionClosedWhileIdleIsRetried(t *testing.T) {
	closeNow := make(chan struct{})
	closed := make(chan struct{})
	srv := newRawServer(t, func(s *rawServer, connNo int, c net.Conn, br *bufio.Reader) {
		for {
			if _, err := s.readRequest(br); err != nil {
				return
			}
			if err := writeResponse(c, http.StatusOK, "ok"); err != nil {
				return
			}
			if connNo == 0 {
				select {
				case <-closeNow:
				case <-s.done:
				}
				_ = c.Close() // a FIN on an idle connection
				close(closed)
				return
			}
		}
	})
	tr := newTransport(t, nil, &Transport{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if resp, _, err := do(tr, newRequest(t, testCtx(t), http.MethodPut, srv.URL()+"/a", "first")); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first PUT: got %v, %v; want 200", resp, err)
	}
	// The second PUT takes the idle connection; the server closes it just
	// then, and the client sees the close before it writes.
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			return
		}
		select {
		case <-closed:
			return
		default:
		}
		close(closeNow)
		<-closed
		time.Sleep(50 * time.Millisecond) // a bounded wait for the client's read of the FIN
	}}
	ctx := httptrace.WithClientTrace(testCtx(t), trace)
	resp, body, err := do(tr, newRequest(t, ctx, http.MethodPut, srv.URL()+"/b", "second"))
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("second PUT: got %v, %q, %v; want 200 ok on a new connection", resp, body, err)
	}
	if got := srv.connCount(); got != 2 {
		t.Errorf("connections: got %d, want 2", got)
	}
}
