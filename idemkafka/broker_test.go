package idemkafka_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemtest"
)

func TestBrokerSuite(t *testing.T) {
	t.Parallel()
	idemtest.BrokerSuite(t, func(t *testing.T) idemtest.BrokerEnv {
		f := setup(t, 3)
		return idemtest.BrokerEnv{
			Topic:    f.topic,
			Sink:     f.sink,
			Features: f.sink.Features(),
			NewSource: func(t *testing.T) idem.Source {
				return f.source(t)
			},
			// A closed source leaves the group at once; the next member resumes from
			// the committed offsets as soon as it has joined.
			Redelivery: 5 * time.Second,
		}
	})
}
