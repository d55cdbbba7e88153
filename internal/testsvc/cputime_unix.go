//go:build unix

package testsvc

import (
	"syscall"
	"testing"
	"time"
)

// ProcessCPU is the user and system CPU time this process has used so far; a
// benchmark's CPU per operation is its difference over the operations.
func ProcessCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
