package fleet

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Redis is a redis-server of the run's own, on a loopback port and in a
// directory that stay the same across Kill and Restart: with its
// append-only file, a restart reloads what it acknowledged.
type Redis struct {
	bin, dir string
	port     int
	args     []string
	cmd      *exec.Cmd
}

// AOFAlways are the arguments of a Redis that loses no acknowledged write:
// an append-only file, fsync before each reply.
var AOFAlways = []string{"--appendonly", "yes", "--appendfsync", "always"}

// ErrNoRedis is returned by StartRedis when no redis-server is installed.
var ErrNoRedis = errors.New("fleet: no redis-server installed")

// StartRedis starts a redis-server on a free loopback port, its files in
// dir, with args added, and waits until it answers PING.
func StartRedis(dir string, args ...string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoRedis, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &Redis{bin: bin, dir: dir, port: port, args: args}
	if err := r.Restart(); err != nil {
		return nil, err
	}
	return r, nil
}

// Addr is the server's address, host:port.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Restart starts the server (again) and waits, at most 10s, until it
// answers PING.
func (r *Redis) Restart() error {
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "",
		"--daemonize", "no", "--dir", r.dir, "--loglevel", "warning"}, r.args...)
	r.cmd = exec.Command(r.bin, args...)
	r.cmd.SysProcAttr = childAttr()
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); !ping(r.Addr()); {
		if time.Now().After(deadline) {
			r.Kill()
			return fmt.Errorf("redis-server on %s did not answer PING within 10s", r.Addr())
		}
		time.Sleep(10 * time.Millisecond) // a bounded wait for a real socket
	}
	return nil
}

// Pause stops the process without closing its sockets (SIGSTOP): a Redis
// that accepts connections and never answers. Resume undoes it.
func (r *Redis) Pause()  { _ = r.cmd.Process.Signal(syscall.SIGSTOP) }
func (r *Redis) Resume() { _ = r.cmd.Process.Signal(syscall.SIGCONT) }

// Kill kills the process (SIGKILL: nothing is flushed that was not) and
// waits for it to exit. It is safe to call on a killed server.
func (r *Redis) Kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT) // a paused process dies of SIGKILL only once continued
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
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
