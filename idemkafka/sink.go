package idemkafka

import (
	"context"
	"slices"
	"sync"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Sink publishes idem messages to Kafka with franz-go's idempotent producer and
// acks=all: a record is confirmed once every in-sync replica has it, and the
// producer's sequence numbers keep its own retries from writing it twice.
type Sink struct {
	client *kgo.Client
}

var _ brokerkit.Sink = (*Sink)(nil)

// NewSink connects a producer to cfg.Brokers. Close it when done.
func NewSink(cfg SinkConfig) (*Sink, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Publish waits for its records, so lingering only adds latency.
		kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(maxRecordBatchBytes),
	}
	client, err := kgo.NewClient(append(opts, cfg.Options...)...)
	if err != nil {
		return nil, &idem.InputError{Field: "SinkConfig.Options", Reason: "are refused by franz-go: " + err.Error(), Fix: "fix or remove the offending option"}
	}
	if client.OptValue(kgo.DisableIdempotentWrite) == true {
		client.Close()
		return nil, &idem.InputError{Field: "SinkConfig.Options", Reason: "disable the idempotent producer",
			Fix: "remove kgo.DisableIdempotentWrite: without it a retried produce can write a record twice"}
	}
	if acks, _ := client.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		client.Close()
		return nil, &idem.InputError{Field: "SinkConfig.Options", Reason: "lower the required acks below all in-sync replicas",
			Fix: "remove kgo.RequiredAcks: a record acknowledged by the leader alone is lost if the leader fails"}
	}
	return &Sink{client: client}, nil
}

// Publish validates every message, then produces them all and waits until Kafka
// confirmed each one. Message.Topic is the record's topic, Message.OrderingKey its
// key (so one key stays on one partition, in order), Message.ID travels in the
// idem.HeaderID header and Message.Headers as record headers.
//
// On error some messages may have been written; publishing them again is safe, as
// the consumer's inbox deduplicates on their IDs. When Kafka confirmed some, the
// error is an *idem.PublishError saying which, so the outbox relay sends only the
// others again (Kafka keeps every copy). If ctx ends first, Publish returns
// without waiting: the records already handed to the producer may still be written.
func (s *Sink) Publish(ctx context.Context, msgs ...idem.Message) error {
	for _, m := range msgs {
		if err := m.Validate(); err != nil {
			return err
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	p := &pending{done: make(chan struct{}), failed: make([]bool, len(msgs))}
	p.wg.Add(len(msgs))
	for i, m := range msgs {
		s.client.Produce(ctx, toRecord(m), func(_ *kgo.Record, err error) { p.result(i, err) })
	}
	go func() { p.wg.Wait(); close(p.done) }()
	select {
	case <-p.done:
	case <-ctx.Done():
		return &idem.BackendError{Backend: backend, Op: "publish", Err: ctx.Err()}
	}
	return p.outcome()
}

// pending collects the produce results of one Publish call; the first error wins.
type pending struct {
	wg     sync.WaitGroup
	done   chan struct{}
	mu     sync.Mutex
	err    error
	failed []bool // by message of the batch
}

func (p *pending) result(i int, err error) {
	if err != nil {
		p.mu.Lock()
		if p.err == nil {
			p.err = err
		}
		p.failed[i] = true
		p.mu.Unlock()
	}
	p.wg.Done()
}

// outcome is Publish's error once every record has its result: nil, or the first
// error, in an *idem.PublishError when some records were written.
func (p *pending) outcome() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		return nil
	}
	err := error(&idem.BackendError{Backend: backend, Op: "publish", Err: p.err})
	if slices.Contains(p.failed, false) {
		acc := make([]bool, len(p.failed))
		for i, f := range p.failed {
			acc[i] = !f
		}
		err = &idem.PublishError{Accepted: acc, Err: err}
	}
	return err
}

// toRecord maps a message to a record; m is valid.
func toRecord(m idem.Message) *kgo.Record {
	r := &kgo.Record{Topic: m.Topic, Value: m.Payload}
	if m.OrderingKey != "" {
		r.Key = []byte(m.OrderingKey)
	}
	r.Headers = make([]kgo.RecordHeader, 0, len(m.Headers)+1)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: idem.HeaderID, Value: []byte(m.ID)})
	for k, v := range m.Headers {
		if k == idem.HeaderID {
			continue // the ID travels once, from Message.ID
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return r
}

// Features reports what Kafka guarantees to the messages this sink publishes; see
// Source.Features.
func (s *Sink) Features() idem.Features { return adapterFeatures() }

// MessagingSystem is the messaging.system of the spans of the outbox relay and the
// inbox that use it: "kafka".
func (s *Sink) MessagingSystem() string { return "kafka" }

// Close disconnects the producer. Every Publish that returned nil is already
// written; records of one that returned early on its ctx may be dropped if still
// buffered, which that Publish's error already allowed.
// Ping checks that a broker of the cluster answers (an ApiVersions request to
// each known broker until one does): the producer connects lazily, so without it a
// sink pointed at a closed port is only found out by its first Publish. The outbox
// relay calls it at start.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx); err != nil {
		return &idem.BackendError{Backend: backend, Op: "ping", Err: err}
	}
	return nil
}

func (s *Sink) Close() error {
	s.client.Close()
	return nil
}

// adapterFeatures is what the adapter promises on both ends; doc.go explains each flag.
func adapterFeatures() idem.Features { return idem.Features{OrderedPerKey: true, DelayedNak: true} }
