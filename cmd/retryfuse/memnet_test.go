package main

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
)

// memNet is a network in memory: listeners whose connections are net.Pipe
// pairs, so that servers and clients can run inside a testing/synctest
// bubble, where a goroutine waiting on a pipe is durably blocked and the
// bubble's clock moves on without it. Every listener and connection must
// be made inside the bubble.
type memNet struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	next      int
}

func newMemNet() *memNet { return &memNet{listeners: map[string]*memListener{}} }

// listen makes a listener at a new address of its own.
func (n *memNet) listen() (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	l := &memListener{n: n, addr: memAddr("127.0.0.1:" + strconv.Itoa(n.next)), conns: make(chan net.Conn), closed: make(chan struct{})}
	n.listeners[string(l.addr)] = l
	return l, nil
}

// dial connects to the listener at addr.
func (n *memNet) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "mem", Err: errors.New("connection refused")}
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, &net.OpError{Op: "dial", Net: "mem", Err: errors.New("connection refused")}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type memListener struct {
	n         *memNet
	addr      memAddr
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.n.mu.Lock()
		delete(l.n.listeners, string(l.addr))
		l.n.mu.Unlock()
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return l.addr }

type memAddr string

func (memAddr) Network() string  { return "mem" }
func (a memAddr) String() string { return string(a) }
