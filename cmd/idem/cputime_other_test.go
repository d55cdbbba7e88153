//go:build !unix

package main

import (
	"testing"
	"time"
)

// processCPU is zero where getrusage is not at hand: BenchmarkServe then reports
// no CPU figures.
func processCPU(*testing.B) time.Duration { return 0 }
