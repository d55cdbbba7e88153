//go:build !linux

package testsvc

import "os/exec"

// setPdeathsig has no equivalent here: call StopRedisCluster from TestMain.
func setPdeathsig(*exec.Cmd) {}
