package idemredis_test

import (
	"os"
	"testing"

	"github.com/idemhq/idem/internal/testsvc"
)

// TestMain stops the Redis Cluster the cluster tests start (one per test binary).
func TestMain(m *testing.M) {
	code := m.Run()
	testsvc.StopRedisCluster()
	os.Exit(code)
}
