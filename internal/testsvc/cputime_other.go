//go:build !unix

package testsvc

import (
	"testing"
	"time"
)

// ProcessCPU is zero where getrusage is not at hand: CPU-per-operation figures then
// read zero.
func ProcessCPU(testing.TB) time.Duration { return 0 }
