package retryfusesql

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/retryfuse/retryfuse/idempotency"
	"github.com/retryfuse/retryfuse/ledger"
	"github.com/stretchr/testify/require"
)

// tcpProxy forwards loopback connections to target until closed; Close
// ends every connection it holds, as a database going away would.
type tcpProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(up, c); up.Close() })
			p.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(p.Close)
	return p
}

func (p *tcpProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// PostgreSQL behind a proxy that goes away: the connections the pool
// holds break, new ones are refused.
func TestMiddlewareAnswers503WhenPostgresGoesAway(t *testing.T) {
	b := postgresBackend(t)
	u, err := url.Parse(b.dsn)
	require.NoError(t, err)
	p := newTCPProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	db := openDB(t, "pgx", u.String())
	l := b.ledgerOn(t, db, LedgerConfig{})
	h := &charges{}
	for _, mode := range []struct {
		name   string
		ledger ledger.Ledger
	}{{"ordinary", l}, {"transactional", l.Transactional()}} {
		srv := middlewareServer(t, mode.ledger, h)
		require.Equal(t, http.StatusCreated, postKeyed(t, srv, mode.name+"-before", "x").status, mode.name)
	}
	p.Close()
	for _, mode := range []struct {
		name   string
		ledger ledger.Ledger
	}{{"ordinary", l}, {"transactional", l.Transactional()}} {
		srv := middlewareServer(t, mode.ledger, h)
		got := postKeyed(t, srv, mode.name+"-after", "x")
		require.Equal(t, http.StatusServiceUnavailable, got.status, mode.name)
		require.Contains(t, got.body, idempotency.ProblemLedgerUnavailable, mode.name)
	}
	require.Equal(t, int64(2), h.runs.Load(), "a handler ran while the database was away")
	_, err = l.Begin(ctx(t), "k", fpA)
	require.ErrorIs(t, err, ledger.ErrUnavailable)
}
