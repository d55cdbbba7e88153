package idemnats

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/idemhq/idem"
	"github.com/nats-io/nats.go/jetstream"
)

var _ idem.Settler = (*settler)(nil)

// deliveries wraps received messages. The metadata (delivery count, stream
// sequence) is parsed from the ack subject, so it costs no round trip.
// ackWait bounds each Ack's wait for the server's confirmation.
func deliveries(msgs []jetstream.Msg, ackWait time.Duration) []idem.Delivery {
	out := make([]idem.Delivery, len(msgs))
	for i, m := range msgs {
		d := idem.Delivery{Message: fromNATS(m), Settler: &settler{msg: m, ackWait: ackWait}}
		if md, err := m.Metadata(); err == nil {
			d.Attempt = int(min(md.NumDelivered, math.MaxInt32)) // a uint64: no wrap to negative
			d.Position = fmt.Sprintf("stream seq %d", md.Sequence.Stream)
		}
		out[i] = d
	}
	return out
}

// settler settles one JetStream message.
type settler struct {
	msg     jetstream.Msg
	ackWait time.Duration
}

// Ack is JetStream's double ack (AckSync): it waits for the server to confirm, so
// an ack lost on the way is an error the caller sees (and may retry) rather than a
// silent redelivery. It waits at most the consumer's AckWait (and ctx): once
// AckWait has passed the server redelivers the message whatever became of the
// ack, so a confirmation lost in a connection cut does not hold the caller longer.
func (s *settler) Ack(ctx context.Context) error {
	if s.ackWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.ackWait)
		defer cancel()
	}
	if err := s.msg.DoubleAck(ctx); err != nil {
		return s.fail("ack", err)
	}
	return nil
}

// Nak asks JetStream to redeliver after delay (NakWithDelay); delay <= 0 asks for
// redelivery at once. A Nak is not confirmed by the server; if it is lost, the
// message comes back after AckWait instead.
func (s *settler) Nak(ctx context.Context, delay time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var err error
	if delay > 0 {
		err = s.msg.NakWithDelay(delay)
	} else {
		err = s.msg.Nak()
	}
	if err != nil {
		return s.fail("nak", err)
	}
	return nil
}

// fail reports a settle failure. Settling twice is the caller's mistake, not the
// broker's, so it is not a (retryable) BackendError.
func (s *settler) fail(op string, err error) error {
	where := s.msg.Subject()
	if md, mdErr := s.msg.Metadata(); mdErr == nil {
		where = fmt.Sprintf("%s (stream seq %d)", where, md.Sequence.Stream)
	}
	if errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		return fmt.Errorf("idemnats: %s of %s: the delivery was already settled: %w", op, where, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("idemnats: %s of %s: %w", op, where, err)
	}
	return &idem.BackendError{Backend: backend, Op: op, Err: fmt.Errorf("%s: %w", where, err)}
}
