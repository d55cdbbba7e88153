package idemnats

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	"github.com/nats-io/nats.go/jetstream"
)

var _ idem.Settler = (*settler)(nil)

// deliveries wraps received messages and keeps them from redelivery until they
// are settled. The metadata (delivery count, stream sequence) is parsed from the
// ack subject, so it costs no round trip.
func (s *Source) deliveries(msgs []jetstream.Msg) []idem.Delivery {
	out := make([]idem.Delivery, len(msgs))
	now := time.Now()
	for i, m := range msgs {
		st := &settler{msg: m, ackWait: s.cfg.AckWait, cons: s.cons, held: &s.held, watch: s.watch}
		d := idem.Delivery{Message: fromNATS(m), Settler: st}
		if md, err := m.Metadata(); err == nil {
			d.Attempt = int(min(md.NumDelivered, math.MaxInt32)) // a uint64: no wrap to negative
			d.Position = fmt.Sprintf("stream seq %d", md.Sequence.Stream)
			st.position = d.Position
		}
		out[i] = d
		s.held.Add(st, now, now.Add(s.cfg.AckWait))
	}
	return out
}

// settler settles one JetStream message. ackWait bounds each Ack's wait for the
// server's confirmation; cons, if set, is asked for its ack floor when an ack goes
// unconfirmed; held, if set, keeps the message from redelivery until its first
// settle.
type settler struct {
	msg     jetstream.Msg
	ackWait time.Duration
	cons    jetstream.Consumer          // nil in tests of the settler alone
	held    *brokerkit.Keeper[*settler] // nil in tests of the settler alone
	watch   *connWatch                  // the Source's connection's losses
	// position is Delivery.Position, "" when the metadata could not be read.
	position string
	once     brokerkit.Once
}

// Ack is JetStream's double ack (AckSync): it waits for the server to confirm, so
// an ack lost on the way is an error the caller sees (and may retry) rather than a
// silent redelivery. It waits at most the consumer's AckWait (and ctx): once
// AckWait has passed the server redelivers the message whatever became of the
// ack, so a confirmation lost in a connection cut does not hold the caller longer.
func (s *settler) Ack(ctx context.Context) error {
	if !s.begin() {
		return s.settled("ack")
	}
	err := s.ack(ctx)
	if err != nil {
		s.once.Undo()
	}
	return err
}

func (s *settler) ack(ctx context.Context) error {
	caller := ctx
	if s.ackWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.ackWait)
		defer cancel()
	}
	// During a consumer leader election an ack may go unconfirmed. It is tried
	// again, each try bounded by a part of AckWait: acking again is harmless. But
	// a consumer leader does not answer an ack of a message no longer pending,
	// so when the first try was applied and its confirmation lost, the next ones
	// time out too: the consumer's ack floor tells that case apart.
	try := max(s.ackWait/4, 200*time.Millisecond)
	if s.ackWait == 0 {
		try = 5 * time.Second
	}
	retry := newBackoff(max(s.ackWait, try))
	for {
		// A confirmation lost with its connection is tried again at once.
		err := s.watch.request(ctx, try, s.msg.DoubleAck)
		if err == nil {
			return nil
		}
		if !transient(caller, err) { // the caller's cancellation, or a failure for good
			return s.fail("ack", err)
		}
		if s.belowAckFloor(caller, try) {
			return nil
		}
		if ctx.Err() != nil || !retry.wait(ctx) {
			return s.fail("ack", fmt.Errorf("not confirmed after %d tries within AckWait (it may have been applied; if not, the message is delivered again): %w", retry.tries+1, err))
		}
	}
}

// belowAckFloor reports whether the consumer has acknowledged the message: its
// ack floor (every message up to it acknowledged) is at or past the message.
func (s *settler) belowAckFloor(ctx context.Context, wait time.Duration) bool {
	if s.cons == nil {
		return false
	}
	md, err := s.msg.Metadata()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	info, err := s.cons.Info(ctx)
	return err == nil && info.AckFloor.Stream >= md.Sequence.Stream
}

// Nak asks JetStream to redeliver after delay (NakWithDelay); delay <= 0 asks for
// redelivery at once. A Nak is not confirmed by the server; if it is lost, the
// message comes back after AckWait instead.
func (s *settler) Nak(ctx context.Context, delay time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !s.begin() {
		return s.settled("nak")
	}
	var err error
	if delay > 0 {
		err = s.msg.NakWithDelay(delay)
	} else {
		err = s.msg.Nak()
	}
	if err != nil {
		s.once.Undo()
		return s.fail("nak", err)
	}
	return nil
}

// begin claims the delivery's settle (false: another settle has it). From then
// the source no longer keeps the message from redelivery: if the settle fails,
// JetStream delivers it again after AckWait unless a retry settles it.
func (s *settler) begin() bool {
	if !s.once.Begin() {
		return false
	}
	if s.held != nil {
		s.held.Remove(s)
	}
	return true
}

// settled is the error of a second settle.
func (s *settler) settled(op string) error {
	where := s.position
	if where == "" {
		where = s.msg.Subject()
	}
	return brokerkit.Settled("idemnats", op, where)
}

// fail reports a settle failure. Settling twice is the caller's mistake, not the
// broker's, so it is not a (retryable) BackendError.
func (s *settler) fail(op string, err error) error {
	where := s.msg.Subject()
	if md, mdErr := s.msg.Metadata(); mdErr == nil {
		where = fmt.Sprintf("%s (stream seq %d)", where, md.Sequence.Stream)
	}
	if errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		return fmt.Errorf("idemnats: %s of %s: %w: %w", op, where, idem.ErrSettled, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("idemnats: %s of %s: %w", op, where, err)
	}
	return &idem.BackendError{Backend: backend, Op: op, Err: fmt.Errorf("%s: %w", where, err)}
}
