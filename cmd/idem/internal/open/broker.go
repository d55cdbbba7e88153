package open

import (
	"context"
	"errors"
	"fmt"
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

// keepingSource is an ownedSource whose source keeps its unsettled deliveries
// from redelivery and can pause that (chaos.RenewalPauser: idemnats).
type keepingSource struct {
	*ownedSource
	keeper chaos.RenewalPauser
}

func (s keepingSource) PauseRenewals() (resume func()) { return s.keeper.PauseRenewals() }

// Broker is a verify.Broker and what closes it.
type Broker struct {
	name, topic string
	proxy       *chaos.Proxy
	openSink    func(ctx context.Context) (idem.Sink, error)
	openSource  func(ctx context.Context) (idem.Source, error)
	stored      func(ctx context.Context) (int, bool)
	cumulative  bool               // acks are offsets (Kafka)
	keeps       bool               // unsettled deliveries come back only when the channel closes (RabbitMQ)
	ackWait     time.Duration      // 0: verifyAckWait
	nodes       verify.NodeFaulter // kills nodes and cuts routes (nats-cluster:), or nil
	dbQueue     bool               // db:: no broker, the run's database is the queue
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

// KeepsUnsettled tells the run that the broker has no ack wait (RabbitMQ): an
// unsettled delivery comes back when its channel closes, so a lost ack is
// injected as a Nak of the ack wait.
func (b *Broker) KeepsUnsettled() bool { return b.keeps }
func (b *Broker) Stored(ctx context.Context) (int, bool) {
	if b.stored == nil {
		return 0, false
	}
	return b.stored(ctx)
}

// DatabaseQueue tells the run that there is no broker (db:): the order
// service enqueues into the run's database (package queue) and the consumers
// claim from it (verify.DBQueue).
func (b *Broker) DatabaseQueue() bool { return b.dbQueue }

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

// verifyQueueLease is the lease of the consumers' queue Sources in verify runs
// (--broker db:): short, so that the messages of killed and paused consumers are
// taken over within a run. It is the broker's AckWait: the run's settle waits
// for it to pass quietly.
const verifyQueueLease = 2 * time.Second

// openDBQueueBroker is verify's --broker db:: no broker at all. The run's
// database is the queue; the flow opens it (package queue) on the database it
// was given, so the Broker only names the topic and says what it is.
func openDBQueueBroker(b *Broker, raw, run string) error {
	if raw != "db:" {
		return fmt.Errorf("--broker %q: db: takes nothing after the colon: the queue is the run's database (--db)", raw)
	}
	b.name, b.topic, b.dbQueue, b.ackWait = "database queue (idem_queue in --db, no broker)", "verify.orders."+run, true, verifyQueueLease
	b.openSink = func(context.Context) (idem.Sink, error) {
		return nil, errors.New("verify: --broker db: has no sink: the order service enqueues into the database")
	}
	b.openSource = func(context.Context) (idem.Source, error) {
		return nil, errors.New("verify: --broker db: has no broker source: the consumers claim from the database's queue")
	}
	return nil
}
