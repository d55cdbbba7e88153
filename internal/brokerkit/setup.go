package brokerkit

import (
	"sync"

	"github.com/idemhq/idem"
)

// CloseOnce is the start of every adapter's Close: under mu it marks the adapter
// closed and runs detach (which takes what Close must give back or stop: buffered
// messages, pending timers, a channel), once. A second Close finds closed set and
// returns false without running detach, so Close is idempotent the same way on
// every adapter. detach runs with mu held; what it takes is handed back after
// CloseOnce returns, outside the lock.
func CloseOnce(mu sync.Locker, closed *bool, detach func()) bool {
	mu.Lock()
	defer mu.Unlock()
	if *closed {
		return false
	}
	*closed = true
	detach()
	return true
}

// Setup is the prologue of an adapter's constructor: it refuses a missing client
// (nilClient: the caller's client == nil, since a typed nil in an interface is
// the caller's to see) as an *idem.InputError naming field, with fix, and returns
// cfg with its defaults applied and checked by withDefaults.
func Setup[C any](nilClient bool, field, fix string, cfg C, withDefaults func(C) (C, error)) (C, error) {
	if nilClient {
		return cfg, &idem.InputError{Field: field, Reason: "is nil", Fix: fix}
	}
	return withDefaults(cfg)
}

// Configure is Setup for an adapter whose check of its client says more than
// nil (idemamqp refuses automatic recovery): clientErr is that check's verdict,
// returned as it is.
func Configure[C any](clientErr error, cfg C, withDefaults func(C) (C, error)) (C, error) {
	if clientErr != nil {
		return cfg, clientErr
	}
	return withDefaults(cfg)
}

// Source is what every adapter's source is: an idem.Source that reports its
// Features (idemtest.BrokerSuite runs the case of each). An adapter checks it at
// compile time: var _ brokerkit.Source = (*Source)(nil).
type Source interface {
	idem.Source
	idem.FeatureReporter
}

// Sink is what every adapter's sink is: an idem.Sink that reports its Features.
type Sink interface {
	idem.Sink
	idem.FeatureReporter
}
