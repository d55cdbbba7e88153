package idemkafka

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Source receives idem messages as a member of a Kafka consumer group. It commits a
// partition's offset only up to its first unacknowledged record, so a crash, a
// rebalance or Close redelivers every record whose effect is not acknowledged.
type Source struct {
	cfg    SourceConfig
	client *kgo.Client

	// commitMu orders commits: a revocation's final commit waits for a background
	// commit in flight, so no older offset lands after it.
	commitMu sync.Mutex

	mu     sync.Mutex
	parts  map[topicPartition]*partition
	naks   nakQueue
	wakers map[uint64]context.CancelFunc // polls to interrupt when a Nak is due
	waker  uint64
	closed bool

	pollSlot chan struct{} // held from PollRecords to AllowRebalance
	acked    chan struct{} // an Ack moved a commit point: commitLoop commits

	stopLoop  context.CancelFunc
	loopDone  chan struct{}
	closeOnce sync.Once
}

var _ brokerkit.Source = (*Source)(nil)

// NewSource joins cfg.Group on cfg.Brokers and consumes cfg.Topics. Joining happens
// in the background; Receive returns records once partitions are assigned. Close
// the source to leave the group.
func NewSource(cfg SourceConfig) (*Source, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, parts: make(map[topicPartition]*partition), wakers: make(map[uint64]context.CancelFunc),
		pollSlot: make(chan struct{}, 1), acked: make(chan struct{}, 1), loopDone: make(chan struct{})}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.Options...)
	opts = append(opts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		// Polling and registering the polled records in s.parts is one step that a
		// rebalance callback cannot split; Receive allows rebalances again right
		// after, so unacknowledged deliveries never hold a rebalance up. See doc.go.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
	)
	if cfg.StoredOffsets != nil {
		opts = append(opts, kgo.AdjustFetchOffsetsFn(s.adjustOffsets))
	}
	s.client, err = kgo.NewClient(opts...)
	if err != nil {
		return nil, &idem.InputError{Field: "SourceConfig.Options", Reason: "are refused by franz-go: " + err.Error(), Fix: "fix or remove the offending option"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopLoop = cancel
	go s.commitLoop(ctx)
	return s, nil
}

// Receive returns up to max deliveries: first Nak'd records whose delay has passed,
// otherwise what Kafka has, waiting until something arrives or ctx ends. Every
// delivery carries Attempt 0, because Kafka does not count deliveries.
func (s *Source) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	if err := brokerkit.CheckMax(max); err != nil {
		return nil, err
	}
	for {
		ds, next, err := s.redeliver(max)
		if err != nil || len(ds) > 0 {
			return ds, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ds, err = s.poll(ctx, max, next)
		if err != nil || len(ds) > 0 {
			return ds, err
		}
	}
}

// redeliver returns the Nak'd records that are due and when the next one will be.
func (s *Source) redeliver(max int) ([]idem.Delivery, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, time.Time{}, idem.ErrClosed
	}
	ready, next := s.naks.due(time.Now(), max)
	var ds []idem.Delivery
	for _, e := range ready {
		ds = append(ds, s.deliver(e))
	}
	return ds, next, nil
}

// poll waits for records from Kafka until ctx ends, a Nak'd record comes due at
// next (if not zero), or a Nak interrupts it, and returns them as deliveries.
func (s *Source) poll(ctx context.Context, max int, next time.Time) ([]idem.Delivery, error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !next.IsZero() {
		var cancelDeadline context.CancelFunc
		pctx, cancelDeadline = context.WithDeadline(pctx, next)
		defer cancelDeadline()
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, idem.ErrClosed
	}
	s.waker++
	id := s.waker
	s.wakers[id] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.wakers, id)
		s.mu.Unlock()
	}()

	// One poll at a time: AllowRebalance ends the rebalance block of every poll, so
	// a second poll could otherwise lose its protection to the first one's.
	select {
	case s.pollSlot <- struct{}{}:
		defer func() { <-s.pollSlot }()
	case <-pctx.Done():
		return nil, nil // Receive looks at ctx and the Nak queue again
	}
	fetches := s.client.PollRecords(pctx, max)
	ds, closed := s.register(fetches)
	s.client.AllowRebalance()
	if len(ds) > 0 {
		// Errors beside records are franz-go's reports on partitions it retries.
		return ds, nil
	}
	return nil, fetchError(fetches, closed)
}

// register tracks the polled records and returns them as deliveries, or returns
// closed if the source was closed meanwhile: its records are then not delivered,
// so not tracked, and the partitions' next owner receives them.
func (s *Source) register(fetches kgo.Fetches) (ds []idem.Delivery, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, true
	}
	fetches.EachRecord(func(r *kgo.Record) {
		tp := topicPartition{r.Topic, r.Partition}
		p := s.parts[tp]
		if p == nil {
			// Assigned since the last poll. A revoked partition cannot show up here:
			// BlockRebalanceOnPoll keeps revocation out until AllowRebalance.
			p = newPartition()
			s.parts[tp] = p
		}
		ds = append(ds, s.deliver(p.add(r)))
	})
	return ds, false
}

// fetchError turns the errors of a poll without records into Receive's error: nil
// when only a context ended (Receive then checks ctx and the Nak queue).
func fetchError(fetches kgo.Fetches, closed bool) error {
	var failed error
	fetches.EachError(func(_ string, _ int32, err error) {
		switch {
		case errors.Is(err, kgo.ErrClientClosed):
			closed = true
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		case failed == nil:
			failed = err
		}
	})
	switch {
	case closed:
		return idem.ErrClosed
	case failed != nil:
		return &idem.BackendError{Backend: backend, Op: "receive", Err: failed}
	}
	return nil
}

// deliver hands e to the caller (again); s.mu is held.
func (s *Source) deliver(e *entry) idem.Delivery {
	e.state = stateDelivered
	e.deliveries++
	r := e.rec
	m := fromRecord(r)
	st := &e.first // one allocation fewer on the common path
	if e.deliveries > 1 {
		st = &settler{}
	}
	*st = settler{src: s, e: e, delivery: e.deliveries}
	return idem.Delivery{
		Message:  m,
		Position: position(r),
		Settler:  st,
	}
}

// position is Delivery.Position of r: "partition 3 offset 1017".
func position(r *kgo.Record) string {
	return "partition " + strconv.FormatInt(int64(r.Partition), 10) + " offset " + strconv.FormatInt(r.Offset, 10)
}

// fromRecord maps a record to a message: the ID from the idem.HeaderID header (the
// last, if a producer sent several), the other headers as they are (the last value
// of a repeated key). A record without the header gets ID "", which the inbox
// dead-letters.
func fromRecord(r *kgo.Record) idem.Message {
	m := idem.Message{Topic: r.Topic, Payload: r.Value}
	if len(r.Key) > 0 {
		m.OrderingKey = string(r.Key)
	}
	for _, h := range r.Headers {
		if h.Key == idem.HeaderID {
			m.ID = string(h.Value)
			continue
		}
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(r.Headers))
		}
		m.Headers[h.Key] = string(h.Value)
	}
	return m
}

// wake interrupts every poll in progress so Receive looks at the Nak queue again;
// s.mu is held.
func (s *Source) wake() {
	for id, cancel := range s.wakers {
		cancel()
		delete(s.wakers, id)
	}
}

// Commit commits every acknowledged offset now rather than at the next
// CommitInterval, and waits for the group coordinator's answer: call it after
// acknowledging a batch where Ack should mean committed (at the cost of a round
// trip per batch), or before a planned pause.
func (s *Source) Commit(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return idem.ErrClosed
	}
	if err := s.commit(ctx, nil, false); err != nil {
		return &idem.BackendError{Backend: backend, Op: "ack", Err: err}
	}
	return nil
}

// Features reports what the adapter guarantees beyond at-least-once delivery;
// doc.go explains each flag.
func (s *Source) Features() idem.Features { return adapterFeatures() }

// MessagingSystem is the messaging.system of the spans of the outbox relay and the
// inbox that use it: "kafka".
func (s *Source) MessagingSystem() string { return "kafka" }

// Close commits what was acknowledged, leaves the group (so its partitions go to
// the other members at once) and disconnects. Deliveries not acknowledged are
// redelivered from the committed offsets, to this group's other members or to the
// next one to join; settling them after Close returns ErrRevoked. A Receive blocked
// in another goroutine returns idem.ErrClosed.
func (s *Source) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.wake()
		s.mu.Unlock()
		s.stopLoop()
		<-s.loopDone

		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		if err := s.commit(ctx, nil, false); err != nil {
			s.logError("commit on close failed; the records acknowledged since the last commit will be redelivered", err)
		}
		cancel()
		// Leaving the group revokes every partition: onRevoked commits anything
		// acknowledged meanwhile and drops the partitions.
		s.client.CloseAllowingRebalance()

		s.mu.Lock()
		for tp, p := range s.parts {
			p.owned = false
			delete(s.parts, tp)
		}
		s.mu.Unlock()
	})
	return nil
}

func (s *Source) logError(msg string, err error) {
	if s.cfg.Logger != nil {
		s.cfg.Logger.Error("idemkafka: "+msg, slog.String("group", s.cfg.Group), slog.Any("err", err))
	}
}
