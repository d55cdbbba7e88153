package open

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/cmd/idem/internal/verify"
)

// verifyAckWait is how long a delivery stays unacknowledged before the broker
// redelivers it in verify runs: short, so lost acks and crashes resolve quickly.
const verifyAckWait = time.Second

// closer is a sink or source with the connection it owns.
type closer struct {
	close []func() error
}

func (c *closer) Close() error {
	var errs []error
	for _, f := range c.close {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

type ownedSink struct {
	idem.Sink
	closer
}

type ownedSource struct {
	idem.Source
	closer
}

func (s *ownedSource) Close() error {
	return errors.Join(s.Source.Close(), s.closer.Close())
}

// Broker is a verify.Broker and what closes it.
type Broker struct {
	name, topic string
	proxy       *chaos.Proxy
	openSink    func(ctx context.Context) (idem.Sink, error)
	openSource  func(ctx context.Context) (idem.Source, error)
	stored      func(ctx context.Context) (int, bool)
	cumulative  bool               // acks are offsets (Kafka)
	ackWait     time.Duration      // 0: verifyAckWait
	nodes       verify.NodeFaulter // kills nodes and cuts routes (nats-cluster:), or nil
	cleanup     []func()
}

func (b *Broker) Name() string                                        { return b.name }
func (b *Broker) Topic() string                                       { return b.topic }
func (b *Broker) OpenSink(ctx context.Context) (idem.Sink, error)     { return b.openSink(ctx) }
func (b *Broker) OpenSource(ctx context.Context) (idem.Source, error) { return b.openSource(ctx) }
func (b *Broker) AckWait() time.Duration {
	if b.ackWait > 0 {
		return b.ackWait
	}
	return verifyAckWait
}
func (b *Broker) Proxy() *chaos.Proxy { return b.proxy }

// CumulativeAcks tells the run that acks are offsets (Kafka): a lost ack is not a
// fault it can inject there, since no broker redelivers the one record (it would
// only hold the partition's commits back until the consumer restarts).
func (b *Broker) CumulativeAcks() bool { return b.cumulative }
func (b *Broker) Stored(ctx context.Context) (int, bool) {
	if b.stored == nil {
		return 0, false
	}
	return b.stored(ctx)
}

// NodeFaults is the broker's verify.NodeFaulter, nil unless it has several nodes.
func (b *Broker) NodeFaults() verify.NodeFaulter { return b.nodes }

// Close releases what the broker's openers acquired, the last first.
func (b *Broker) Close() {
	for i := len(b.cleanup) - 1; i >= 0; i-- {
		b.cleanup[i]()
	}
}

func (b *Broker) proxyTo(name, addr string) error {
	p, err := chaos.NewProxy(name, addr)
	if err != nil {
		return err
	}
	b.proxy = p
	b.cleanup = append(b.cleanup, p.Close)
	return nil
}
