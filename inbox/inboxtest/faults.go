package inboxtest

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/idemhq/idem"
)

// Faults injects a fault into a proof by its progress, not by the clock: after
// every Every deliveries that the sources it wraps have received, the Receive that
// crossed the mark runs Inject before it returns them. A fault driven by a timer
// may never fire on a fast machine (the proof is over first) or fire only between
// runs on a slow one; one driven by deliveries happens mid-stream on every
// machine. Wrap a BrokerEnv's sources with it, and check Injected when the env is
// cleaned up.
type Faults struct {
	// Every is how many deliveries separate two faults; it must be positive.
	Every int64
	// Inject injects one fault: kill a broker node, move the leaders. It runs on a
	// consumer's goroutine, one at a time, while that consumer waits.
	Inject func()

	mu         sync.Mutex // one Inject at a time
	deliveries atomic.Int64
	injected   atomic.Int64
}

// Wrap returns src with its deliveries counted towards the next fault.
func (f *Faults) Wrap(src idem.Source) idem.Source {
	if f.Every <= 0 || f.Inject == nil {
		panic("inboxtest: Faults needs a positive Every and an Inject")
	}
	return faultySource{src, f}
}

// Injected returns how many faults were injected so far.
func (f *Faults) Injected() int64 { return f.injected.Load() }

type faultySource struct {
	idem.Source
	f *Faults
}

func (s faultySource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := s.Source.Receive(ctx, max)
	if n := int64(len(ds)); n > 0 {
		after := s.f.deliveries.Add(n)
		for mark := (after - n) / s.f.Every; mark < after/s.f.Every; mark++ {
			s.f.mu.Lock()
			s.f.Inject()
			s.f.injected.Add(1)
			s.f.mu.Unlock()
		}
	}
	return ds, err
}
