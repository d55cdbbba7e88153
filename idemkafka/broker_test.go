package idemkafka_test

import (
	"testing"

	"github.com/idemhq/idem/idemtest"
)

func TestBrokerSuite(t *testing.T) {
	t.Parallel()
	idemtest.BrokerSuite(t, func(t *testing.T) idemtest.BrokerEnv { return setup(t, 3).env() })
}
