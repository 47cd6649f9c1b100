package supervise

import (
	"os/exec"
	"syscall"
)

// setParentDeath makes the kernel kill the child if the parent dies without
// stopping it (kill -9), so no orphaned proxy or worker keeps the port.
func setParentDeath(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
