//go:build unix

package main

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the user and system CPU time this process has used so far: its
// goroutines are BenchmarkServe's clients, servers and upstream alike.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
