//go:build !linux

package cdpgate

import "syscall"

func chromiumProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
