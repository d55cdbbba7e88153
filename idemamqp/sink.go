package idemamqp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	amqp "github.com/rabbitmq/amqp091-go"
)

var (
	// ErrUnroutable is wrapped by the error of Publish when SinkConfig.Mandatory is set
	// and the broker returned a message because no queue is bound for its routing key.
	ErrUnroutable = errors.New("idemamqp: message returned unroutable: no queue is bound for its routing key")
	// ErrNacked is wrapped by the error of Publish when the broker refused a message
	// with basic.nack (a queue rejecting publishes when full, an internal error).
	ErrNacked = errors.New("idemamqp: the broker refused the message (basic.nack)")
)

// Sink publishes messages to RabbitMQ on one channel in confirm mode. Publish
// returns only after the broker confirmed every message (for a persistent message
// on a durable queue, after it was written to disk or, on a quorum queue, to a
// majority of replicas). It is safe for concurrent use: AMQP channels are not, so
// Publish calls take turns on the sink's channel.
type Sink struct {
	conn *amqp.Connection
	cfg  SinkConfig

	mu     sync.Mutex // serializes use of pub: one batch's publishes and confirms at a time
	pub    *publisher // nil after its channel died; the next Publish opens another
	closed bool
}

var _ brokerkit.Sink = (*Sink)(nil)

// publisher is one confirm-mode channel with the listeners Publish reads.
type publisher struct {
	ch       *amqp.Channel
	closes   chan *amqp.Error // the broker's reason, when it closes the channel
	returns  *returns         // unroutable mandatory messages; nil without Mandatory
	closeErr error            // the close reason once read from closes
}

// NewSink opens a confirm-mode channel on conn and returns a sink publishing on it.
// The sink does not own conn: close the sink, then the connection. If the channel
// dies (the broker closes it after a publish to a missing exchange, or the
// connection drops), the failing Publish returns a retryable error and the next one
// opens a new channel on conn. Once conn itself is closed, Publish keeps failing:
// dial again and make a new sink. conn must not have automatic recovery
// (amqp.Config.Recovery), for the reasons given at NewSource.
func NewSink(conn *amqp.Connection, cfg SinkConfig) (*Sink, error) {
	cfg, err := brokerkit.Configure(checkConn(conn), cfg, SinkConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	s := &Sink{conn: conn, cfg: cfg}
	if s.pub, err = s.open(); err != nil {
		return nil, &idem.BackendError{Backend: Backend, Op: "open", Err: fmt.Errorf("open a confirm-mode channel: %w", err)}
	}
	return s, nil
}

// Features reports what the sink's messages can rely on: RabbitMQ keeps the order
// of messages published on one channel into one queue, and has no dedup.
func (s *Sink) Features() idem.Features { return idem.Features{OrderedPerKey: true} }

// MessagingSystem is the messaging.system of the spans of the outbox relay and the
// inbox that use it: "rabbitmq".
func (s *Sink) MessagingSystem() string { return "rabbitmq" }

// Publish validates every message, then sends them in order and waits for the
// broker's confirm of each. A message the broker nacks, or returns as unroutable
// (with SinkConfig.Mandatory), fails Publish with a *idem.BackendError naming its
// id; the others of the batch may have been published, and publishing the batch
// again is safe because consumers deduplicate by id. When some messages were
// confirmed (before a nack, a return, or the channel's death), the error is an
// *idem.PublishError saying which, so the outbox relay sends only the others again.
func (s *Sink) Publish(ctx context.Context, msgs ...idem.Message) error {
	pubs := make([]amqp.Publishing, len(msgs))
	for i, m := range msgs {
		if err := validateMessage(m); err != nil {
			return fmt.Errorf("message %d of the batch: %w", i, err)
		}
		pubs[i] = publishing(m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return idem.ErrClosed
	}
	if acc, err := s.publish(ctx, msgs, pubs); err != nil {
		err = &idem.BackendError{Backend: Backend, Op: "publish", Err: err}
		if slices.Contains(acc, true) {
			err = &idem.PublishError{Accepted: acc, Err: err}
		}
		return err
	}
	return nil
}

// publish sends the batch and waits for its confirms. On failure it also says which
// messages the broker confirmed (acked, and not returned unroutable): those are
// stored all the same. It runs with s.mu held.
func (s *Sink) publish(ctx context.Context, msgs []idem.Message, pubs []amqp.Publishing) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.pub == nil || s.pub.ch.IsClosed() {
		if s.conn.IsClosed() {
			return nil, fmt.Errorf("the connection is closed (%w): dial again and make a new sink", amqp.ErrClosed)
		}
		p, err := s.open()
		if err != nil {
			return nil, fmt.Errorf("open a confirm-mode channel: %w", err)
		}
		s.pub = p
	}
	p := s.pub
	confirms := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	var sendErr error
	for i := range msgs {
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, s.cfg.Exchange, msgs[i].Topic, s.cfg.Mandatory, false, pubs[i])
		if err != nil {
			sendErr = err // the channel died or ctx ended; what was sent is still settled below
			break
		}
		confirms = append(confirms, dc)
	}
	failed := make([]error, len(msgs))
	for i, dc := range confirms {
		acked, err := dc.WaitContext(ctx)
		if err != nil {
			// The channel still owes confirms that nobody will read: replace it.
			// The broker sent the returns of the messages before i ahead of their
			// confirms, so those are collected.
			s.discard(p)
			p.markReturned(msgs[:i], failed[:i])
			return confirmed(failed[:i], len(msgs)), fmt.Errorf("waiting for the confirm of message %q (%d of %d unconfirmed): %w", msgs[i].ID, len(msgs)-i, len(msgs), err)
		}
		if !acked {
			failed[i] = p.reason(ErrNacked)
		}
	}
	if sendErr != nil {
		s.discard(p)
		for i := len(confirms); i < len(msgs); i++ {
			failed[i] = fmt.Errorf("not sent: %w", p.reason(sendErr))
		}
	}
	p.markReturned(msgs, failed)
	if p.ch.IsClosed() {
		s.pub = nil
	}
	if err := firstFailure(msgs, failed); err != nil {
		return confirmed(failed, len(msgs)), err
	}
	return nil, nil
}

// confirmed returns, for a batch of n messages, which were confirmed: those of
// failed (the first len(failed) messages, all with their confirm in) without a
// failure.
func confirmed(failed []error, n int) []bool {
	acc := make([]bool, n)
	for i, err := range failed {
		acc[i] = err == nil
	}
	return acc
}

// open opens a channel in confirm mode with its listeners.
func (s *Sink) open() (*publisher, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	p := &publisher{ch: ch, closes: ch.NotifyClose(make(chan *amqp.Error, 1))}
	if s.cfg.Mandatory {
		p.returns = collectReturns(ch.NotifyReturn(make(chan amqp.Return)))
	}
	return p, nil
}

// discard drops p so the next Publish opens a fresh channel. Closing waits for the
// broker's close-ok, which may not come soon when the broker is the reason
// publishing failed, so it happens in the background.
func (s *Sink) discard(p *publisher) {
	if s.pub == p {
		s.pub = nil
	}
	go func() { _ = p.ch.Close() }()
}

// Close closes the sink's channel. Publish then returns idem.ErrClosed. The
// connection stays open: it belongs to the caller.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.pub == nil {
		return nil
	}
	if err := s.pub.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return &idem.BackendError{Backend: Backend, Op: "close", Err: err}
	}
	return nil
}

// reason explains a failure on p: the broker's reason for closing the channel if it
// did (a publish to a missing exchange), otherwise fallback. The client notifies
// close listeners before it fails pending confirms, so the reason is there by then.
// It runs with the sink's mutex held, which guards closeErr.
func (p *publisher) reason(fallback error) error {
	if p.closeErr == nil {
		select {
		case e, ok := <-p.closes:
			if ok && e != nil {
				p.closeErr = fmt.Errorf("the broker closed the channel: %w", e)
			} else {
				p.closeErr = fmt.Errorf("the channel closed: %w", amqp.ErrClosed)
			}
		default:
			return fallback
		}
	}
	return p.closeErr
}

// markReturned marks the messages of the batch the broker returned as unroutable.
// The broker sends a message's basic.return before its ack, so once every confirm
// of the batch is in, all its returns are collected. Returns of earlier batches
// cannot be among them: a batch that did not wait for all its confirms discarded
// its channel.
func (p *publisher) markReturned(msgs []idem.Message, failed []error) {
	if p.returns == nil {
		return
	}
	for _, r := range p.returns.take() {
		for i := range msgs {
			if msgs[i].ID == r.MessageId && failed[i] == nil {
				failed[i] = fmt.Errorf("%w (%d %s: exchange %q, routing key %q)", ErrUnroutable, r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
				break
			}
		}
	}
}

// firstFailure names the first failed message of a window and how many others failed.
func firstFailure(msgs []idem.Message, failed []error) error {
	n, first := 0, -1
	for i, err := range failed {
		if err != nil {
			n++
			if first < 0 {
				first = i
			}
		}
	}
	switch {
	case n == 0:
		return nil
	case n == 1:
		return fmt.Errorf("message %q was not accepted: %w", msgs[first].ID, failed[first])
	default:
		return fmt.Errorf("message %q (and %d more of the batch) was not accepted: %w", msgs[first].ID, n-1, failed[first])
	}
}
