package redistest

import (
	"os/exec"
	"syscall"
)

// setPdeathsig has the kernel kill the server if the process that started
// it dies, so that a crashed test leaves no redis-server behind.
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
