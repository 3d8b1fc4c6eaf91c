//go:build !linux

package fleet

import "syscall"

// childAttr: elsewhere, a child process outlives an interrupted run.
func childAttr() *syscall.SysProcAttr { return nil }
