package cdpgate

import "syscall"

// chromiumProcAttr puts Chromium in a group of its own (killed whole at
// the end) that also dies with the test binary, should it panic.
func chromiumProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
