package idemsqs_test

import (
	"testing"

	"github.com/idemhq/idem/idemsqs"
	"github.com/idemhq/idem/idemsqs/sqsfake"
	"github.com/idemhq/idem/idemtest"
)

// TestBrokerSuite runs the Source/Sink contract on a FIFO queue of the in-process
// fake: dedup within the window, order per message group, visibility-timeout Naks,
// ApproximateReceiveCount as Attempt, trace headers as message attributes.
func TestBrokerSuite(t *testing.T) {
	t.Parallel()
	srv := startFake(t, sqsfake.Config{})
	idemtest.BrokerSuite(t, func(t *testing.T) idemtest.BrokerEnv { return setup(t, srv, idemsqs.QueueConfig{}).env() })
}
