package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// servers are the server processes (this binary, -serve), each
// restarted on a new port when killed.
type servers struct {
	cmd []string     // the server's command, before its options
	o   serveOptions // the server's options

	mu    sync.Mutex
	procs []*exec.Cmd
	addrs []string
	kills int
}

// start starts n servers.
func (s *servers) start(n int) error {
	s.mu.Lock()
	s.procs, s.addrs = make([]*exec.Cmd, n), make([]string, n)
	s.mu.Unlock()
	for i := range n {
		if err := s.startOne(i); err != nil {
			return err
		}
	}
	return nil
}

// startOne starts server i and waits for its address.
func (s *servers) startOne(i int) error {
	cmd := exec.Command(s.cmd[0], append(s.cmd[1:], s.o.args()...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- strings.TrimSpace(sc.Text())
		}
		close(line)
		for sc.Scan() { // drain until the process ends
		}
	}()
	select {
	case addr, ok := <-line:
		if !ok {
			_ = cmd.Wait()
			return fmt.Errorf("server %d exited before listening", i)
		}
		s.mu.Lock()
		s.procs[i], s.addrs[i] = cmd, addr
		s.mu.Unlock()
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("server %d did not listen within 30s", i)
	}
}

// pick returns the address of a random server.
func (s *servers) pick(r *rand.Rand) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[r.IntN(len(s.addrs))]
}

// killOne kills a random server with SIGKILL and starts it again.
func (s *servers) killOne(r *rand.Rand) error {
	s.mu.Lock()
	i := r.IntN(len(s.procs))
	cmd := s.procs[i]
	s.kills++
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	return s.startOne(i)
}

// stop kills every server.
func (s *servers) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cmd := range s.procs {
		if cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		}
	}
}
