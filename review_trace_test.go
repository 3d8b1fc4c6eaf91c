package retryfuse

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"testing"
)

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A server may answer before it has read the request body; net/http then
// returns the response while its write loop is still sending the body, and
// that loop reads the request's ClientTrace when the write ends. The next
// attempt must not rewrite the trace the earlier one's write loop still
// reads: run under -race, this pins the data race of a trace reused in
// place across attempts.
func TestRvTraceNotRewrittenUnderALateWriteLoop(t *testing.T) {
	const bodySize = 64 << 20 // far more than loopback socket buffers hold
	srv := newRawServer(t, func(s *rawServer, connNo int, c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		if connNo == 0 {
			// Answer at once, and hold the connection open without reading
			// the body: the client's write blocks until it gives the
			// connection up.
			_, _ = io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
			<-s.done
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		s.stallConn(c)
	})

	var wrote atomic.Int32
	ctx := httptrace.WithClientTrace(testCtx(t), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Add(1) },
	})
	tr := newTransport(t, newFakeClock(), &Transport{MaxAttempts: 2, Budget: UnlimitedBudget{}})
	tr.randN = func(int64) int64 { return 0 }

	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL(), io.LimitReader(zeros{}, bodySize))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = bodySize
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(io.LimitReader(zeros{}, bodySize)), nil }

	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status: got %d, want 200 from the second attempt", resp.StatusCode)
	}
	tr.CloseIdleConnections()
}
