package fleet

import "syscall"

// childAttr makes a child process die with the process that started it
// (an interrupted run leaves no redis-server behind).
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
