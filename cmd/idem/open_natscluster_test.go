package main

import (
	"strings"
	"testing"
)

// TestVerifyNATSClusterBadBroker: nats-cluster: starts its own nodes, so an
// address is refused with the fix, and an unknown broker's error lists it.
func TestVerifyNATSClusterBadBroker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ broker, want string }{
		{"nats-cluster://127.0.0.1:4222", "takes no address"},
		{"nats-clusterx:", "nats-cluster: (3 embedded nodes)"},
	} {
		_, stderr, err := run(t, "verify", "--ops", "1", "--broker", tc.broker)
		if err == nil || !strings.Contains(err.Error()+stderr, tc.want) {
			t.Errorf("verify --broker %s = %v (stderr %q), want an error saying %q", tc.broker, err, stderr, tc.want)
		}
	}
}
