package testsvc

import (
	"os/exec"
	"syscall"
)

// setPdeathsig makes the kernel kill a cluster node when the test binary dies, so a
// crashed or interrupted test run leaves no redis-server behind.
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
