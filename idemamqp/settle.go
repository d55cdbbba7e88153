package idemamqp

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	amqp "github.com/rabbitmq/amqp091-go"
)

// settler settles one delivery on the channel it arrived on. Delivery tags belong to
// that channel: once it is gone the delivery is requeued by the broker, and settling
// fails instead of touching another channel's messages.
type settler struct {
	src      *Source
	sess     *session
	d        amqp.Delivery
	position string
	once     brokerkit.Once // a second settlement would close the channel
}

var _ idem.Settler = (*settler)(nil)

// Ack acknowledges the delivery (basic.ack, not multiple). RabbitMQ does not confirm
// acks: a nil error means the ack was handed to the connection, and an ack lost on
// the way makes the message come again, which the inbox's dedup absorbs.
func (st *settler) Ack(ctx context.Context) error {
	if err := st.begin(ctx, "ack"); err != nil {
		return err
	}
	if err := st.d.Ack(false); err != nil {
		st.once.Undo()
		return st.failed("ack", err)
	}
	st.sess.settled.Add(1)
	return nil
}

// Nak requeues the delivery. RabbitMQ cannot requeue with a delay, so the source
// honours one itself: with delay > 0 (and SourceConfig.MaxNakDelay not negative)
// the delivery stays unacknowledged for min(delay, MaxNakDelay) and is then nacked
// with requeue; Nak returns at once. Meanwhile it takes one of the Prefetch slots,
// so a consumer naking everything backs off as a whole. If the source closes or its
// channel dies first, the broker requeues the message then, earlier than asked.
// Without a delay, or with delays turned off, it is nacked with requeue at once.
//
// basic.nack, unlike basic.reject, does not count as a failed delivery towards a
// RabbitMQ 4 quorum queue's delivery limit, so the broker never drops a message on
// its own because it was naked: dead-lettering is the inbox's decision.
func (st *settler) Nak(ctx context.Context, delay time.Duration) error {
	if err := st.begin(ctx, "nak"); err != nil {
		return err
	}
	if delay <= 0 || st.src.cfg.MaxNakDelay < 0 {
		if err := st.d.Nack(false, true); err != nil {
			st.once.Undo()
			return st.failed("nak", err)
		}
		st.sess.settled.Add(1)
		return nil
	}
	if st.sess.ch.IsClosed() {
		st.once.Undo()
		return st.failed("nak", amqp.ErrClosed)
	}
	return st.src.requeueAfter(st, min(delay, st.src.cfg.MaxNakDelay))
}

// begin checks ctx and claims the delivery's one settlement (idem.ErrSettled if it
// is taken).
func (st *settler) begin(ctx context.Context, op string) error {
	return st.once.Claim(ctx, "idemamqp", op, st.position)
}

func (st *settler) failed(op string, err error) error {
	return &idem.BackendError{Backend: Backend, Op: op, Err: fmt.Errorf("%s: %w; the broker requeues it when the channel closes", st.position, err)}
}

// requeueAfter nacks st's delivery with requeue after d, unless Close comes first
// (closing the channel requeues it anyway).
func (s *Source) requeueAfter(st *settler, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return st.failed("nak", idem.ErrClosed)
	}
	s.pending[st] = time.AfterFunc(d, func() {
		s.mu.Lock()
		_, due := s.pending[st]
		delete(s.pending, st)
		s.mu.Unlock()
		if !due {
			return
		}
		err := st.d.Nack(false, true)
		if err == nil {
			st.sess.settled.Add(1)
		} else if s.cfg.Logger != nil {
			s.cfg.Logger.Warn("idemamqp: delayed nak failed; the broker requeues the message when the channel closes",
				"position", st.position, "error", err)
		}
	})
	return nil
}
