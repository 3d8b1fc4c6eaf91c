package main

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// redisServer is a redis-server of the run's own on a free loopback port,
// for -ledger redis. It is never killed during the run: the servers are.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
}

func startRedis(dir string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("-ledger redis needs a redis-server (scripts/redis-test installs one): %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &redisServer{addr: "127.0.0.1:" + strconv.Itoa(port)}
	r.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
		"--appendfsync", "always", "--daemonize", "no", "--dir", dir, "--loglevel", "warning")
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); !ping(r.addr); {
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within 10s", r.addr)
		}
		time.Sleep(10 * time.Millisecond) // a bounded wait for a real socket
	}
	return r, nil
}

func (r *redisServer) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	_ = r.cmd.Wait()
}

func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}
