package idemnats

import (
	"context"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	"github.com/nats-io/nats.go/jetstream"
)

var _ brokerkit.Source = (*Source)(nil)

// Source receives from a durable JetStream pull consumer with explicit acks. Every
// source opened with the same stream and durable name competes for one set of
// messages. A Source is safe for concurrent use.
//
// Receive keeps at most one pull request (Fetch) outstanding. Messages it brings
// in after a Receive returned (its ctx ended, or it returned the first messages of
// a batch) are kept for the next Receive instead of being abandoned to AckWait.
// With SourceConfig.Prefetch, the next pull request goes out as soon as the
// buffer is empty and none is outstanding, from a Receive that emptied it or from a
// request that ended after all it brought was handed out; a request that brought
// nothing does not chain, so an idle source asks only when Receive is called.
type Source struct {
	cons jetstream.Consumer
	cfg  SourceConfig

	// pump buffers what the Fetch brings (Pulling: a Fetch is outstanding and
	// its collect is running); its Mu also guards the fields below.
	pump    brokerkit.Pump[jetstream.Msg]
	lastMax int // the last Receive's max: what a prefetch asks for
	// electionRetry paces pull requests ended by leader elections (nil between).
	electionRetry *backoff

	// held keeps the deliveries handed out and not yet settled from being
	// redelivered: every third of AckWait it sends each an in-progress ack, until
	// MaxExtension. It runs until Close.
	held  brokerkit.Keeper[*settler]
	watch *connWatch // the connection's losses: an ack cut off by one is retried at once
	stop  context.CancelFunc
	ended chan struct{} // closed when held's Run has returned
}

// NewSource creates or updates the durable pull consumer cfg describes on js and
// returns a Source reading from it. The consumer acks explicitly, delivers every
// message of the stream from the start (on creation), and never gives up on a
// message (MaxDeliver unlimited): dead-lettering is the inbox's decision, made with
// Delivery.Attempt.
func NewSource(ctx context.Context, js jetstream.JetStream, cfg SourceConfig) (*Source, error) {
	cfg, err := brokerkit.Setup(js == nil, "js", "pass jetstream.New(nc)", cfg, SourceConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	cc := jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
	if len(cfg.FilterSubjects) == 1 {
		cc.FilterSubject = cfg.FilterSubjects[0] // understood by servers before 2.10
	} else {
		cc.FilterSubjects = cfg.FilterSubjects
	}
	var cons jetstream.Consumer
	err = retryTransient(ctx, js.Options().DefaultTimeout, func(ctx context.Context) error {
		var err error
		cons, err = js.CreateOrUpdateConsumer(ctx, cfg.Stream, cc)
		return err
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: backend, Op: "create consumer",
			Err: fmt.Errorf("durable %q on stream %q: %w", cfg.Durable, cfg.Stream, err)}
	}
	s := &Source{cons: cons, cfg: cfg, watch: watchConn(js.Conn()), ended: make(chan struct{})}
	s.held = brokerkit.Keeper[*settler]{Every: cfg.AckWait / 3, Margin: cfg.AckWait, Lease: cfg.AckWait,
		MaxExtension: cfg.MaxExtension, Extend: s.extend, LetGo: s.letGo}
	var kctx context.Context
	kctx, s.stop = context.WithCancel(context.Background())
	go func() {
		defer close(s.ended)
		s.held.Run(kctx)
	}()
	return s, nil
}

// Features reports what JetStream guarantees to idem; see the package documentation.
func (s *Source) Features() idem.Features { return features() }

// MessagingSystem is the messaging.system of the spans of the outbox relay and the
// inbox that use it: "nats".
func (s *Source) MessagingSystem() string { return "nats" }

// Receive returns up to max deliveries, blocking until at least one is available
// or ctx ends (then it returns ctx.Err()). Each delivery must be settled with Ack
// after its effect committed, or Nak. One left unsettled is kept from redelivery
// while the source is open, up to SourceConfig.MaxExtension, and comes back after
// AckWait once the source closes (or its process dies).
func (s *Source) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	if err := brokerkit.CheckMax(max); err != nil {
		return nil, err
	}
	msgs, err := s.pump.Receive(ctx, func() ([]jetstream.Msg, error) { return s.next(max) })
	if err != nil {
		return nil, err
	}
	return s.deliveries(msgs), nil
}

// next hands out up to max buffered messages, or reports the last Fetch's
// failure, or sends a pull request if none is outstanding. s.pump.Mu is held.
func (s *Source) next(max int) ([]jetstream.Msg, error) {
	s.lastMax = max
	if len(s.pump.Buf) > 0 {
		msgs := s.pump.Take(min(max, len(s.pump.Buf)))
		s.prefetch()
		return msgs, nil
	}
	err := s.pump.Failed()
	if err == nil && !s.pump.Pulling {
		err = s.startFetch(max)
	}
	if err != nil {
		return nil, &idem.BackendError{Backend: backend, Op: "receive", Err: err}
	}
	return nil, nil
}

// prefetch sends the next pull request, for as many messages as the last Receive
// asked for, if Prefetch is on, the buffer is empty and none is outstanding. A
// failure is the next Receive's to report: it asks again, and returns the error if
// that fails too. s.pump.Mu is held.
func (s *Source) prefetch() {
	if s.cfg.Prefetch && !s.pump.Closed && len(s.pump.Buf) == 0 && !s.pump.Pulling {
		_ = s.startFetch(s.lastMax)
	}
}

// startFetch sends one pull request for up to max messages and starts its pump.
// s.pump.Mu is held.
func (s *Source) startFetch(max int) error {
	batch, err := s.cons.Fetch(max, jetstream.FetchMaxWait(s.cfg.FetchWait))
	if err != nil {
		return err
	}
	s.pump.Pulling = true
	go s.collect(batch)
	return nil
}

// collect moves the messages of one pull request into the buffer as they arrive, so
// Receive can return the first ones at once. Messages that arrive after Close are
// handed back with a Nak.
func (s *Source) collect(batch jetstream.MessageBatch) {
	brought := false
	for m := range batch.Messages() {
		brought = true
		s.pump.Mu.Lock()
		closed := s.pump.Closed
		if !closed {
			s.pump.Buf = append(s.pump.Buf, m)
			s.pump.Broadcast()
		}
		s.pump.Mu.Unlock()
		if closed {
			s.giveBack(m)
		}
	}
	err := batch.Error()
	// A pull request ended by a leader election is asked again, after a pause
	// that grows while elections last, and reported once they last too long.
	if err != nil && transient(context.Background(), err) {
		s.pump.Mu.Lock()
		if s.electionRetry == nil {
			s.electionRetry = newBackoff(DefaultRetryTimeout)
		}
		retry := s.electionRetry
		s.pump.Mu.Unlock()
		if retry.wait(context.Background()) {
			err = nil
		}
	} else if err == nil {
		s.pump.Mu.Lock()
		s.electionRetry = nil
		s.pump.Mu.Unlock()
	}
	s.pump.Mu.Lock()
	s.pump.Pulling = false
	if err != nil && !s.pump.Closed {
		s.electionRetry = nil
		s.pump.Err = fmt.Errorf("fetch from durable %q on stream %q: %w", s.cfg.Durable, s.cfg.Stream, err)
	}
	if err == nil && brought {
		// Every message was handed out before the request ended (else the
		// buffer holds some): the caller is keeping up, so ask for the next
		// batch now. A request that brought nothing does not chain: an idle
		// source stops asking until its next Receive.
		s.prefetch()
	}
	s.pump.Broadcast()
	s.pump.Mu.Unlock()
}

// Close stops receiving: Receive returns idem.ErrClosed from now on. Messages
// fetched but not yet handed out are Nak'ed so they are redelivered at once;
// deliveries already returned can still be settled (Ack and Nak use the caller's
// connection). A pull request outstanding at Close ends on the server within
// FetchWait; messages it still brings are Nak'ed too.
func (s *Source) Close() error {
	buf, _ := s.pump.Close(nil)
	for _, m := range buf {
		s.giveBack(m)
	}
	s.stop()
	<-s.ended
	s.held.Drain()
	return nil
}

// extend sends an in-progress ack for each of sts, which starts its AckWait
// again; the keeper lets go of those that failed.
func (s *Source) extend(_ context.Context, sts []*settler) map[*settler]error {
	var failed map[*settler]error
	for _, st := range sts {
		if err := st.msg.InProgress(); err != nil {
			if failed == nil {
				failed = map[*settler]error{}
			}
			failed[st] = err
		}
	}
	return failed
}

// letGo warns of a delivery no longer kept from redelivery.
func (s *Source) letGo(st *settler, err error) {
	if s.cfg.Logger == nil {
		return
	}
	if err == nil {
		s.cfg.Logger.Warn("idemnats: a delivery is unsettled after SourceConfig.MaxExtension; it is no longer kept and comes back after AckWait",
			"stream", s.cfg.Stream, "durable", s.cfg.Durable, "position", st.position, "max_extension", s.cfg.MaxExtension)
		return
	}
	s.cfg.Logger.Warn("idemnats: an in-progress ack failed; the message may be delivered again after AckWait",
		"stream", s.cfg.Stream, "durable", s.cfg.Durable, "position", st.position, "error", err)
}

// PauseRenewals stops the in-progress acks of the Source's unsettled deliveries
// until resume is called, as a paused process (stopped, swapped out, frozen in a
// long GC) stops them: past AckWait, JetStream delivers them to another
// consumer. It is for fault injection (idem verify's consumers paused past their
// ack wait, tests). resume may be called more than once.
func (s *Source) PauseRenewals() (resume func()) { return s.held.Pause() }

// giveBack Naks a message the source fetched but will not hand out.
func (s *Source) giveBack(m jetstream.Msg) {
	if err := m.Nak(); err != nil && s.cfg.Logger != nil {
		s.cfg.Logger.Warn("idemnats: nak of a prefetched message at close failed; it returns after AckWait",
			"stream", s.cfg.Stream, "durable", s.cfg.Durable, "subject", m.Subject(), "error", err)
	}
}
