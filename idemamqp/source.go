package idemamqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Source consumes one queue with manual acknowledgements: a delivery stays
// unacknowledged, and is redelivered if its channel closes, until its Settler acks
// it. It is safe for concurrent use.
//
// When the channel or the connection dies, Receive returns a retryable
// *idem.BackendError instead of blocking; the broker requeues every unacknowledged
// delivery. Deliveries that had arrived but were not yet returned are dropped with
// the channel, not returned: their acks could not reach the broker. The next Receive opens a new channel on the same connection; if the
// connection itself is closed (conn.IsClosed()), that keeps failing, and the caller
// must dial again and open a new Source.
type Source struct {
	conn *amqp.Connection
	cfg  SourceConfig
	done chan struct{} // closed by Close, to wake blocked Receive calls

	mu      sync.Mutex
	sess    *session // nil after it failed; the next Receive opens another
	closed  bool
	pending map[*settler]*time.Timer // delayed Naks not yet sent
}

var _ brokerkit.Source = (*Source)(nil)

// session is one channel consuming the queue.
type session struct {
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery // what count forwards, as it arrives from the broker
	closes     chan *amqp.Error     // the reason, when the broker or the connection closes ch

	// arrived counts the deliveries the broker sent on ch, settled those acked or
	// nacked on it: their difference is what ch holds unacknowledged, for Lag.
	arrived, settled atomic.Int64

	failOnce sync.Once
	failErr  error
}

// NewSource opens a channel on conn and starts consuming cfg.Queue, which must
// exist. The source does not own conn: close the source, then the connection.
//
// conn must not have automatic recovery (amqp.Config.Recovery): after a recovery the
// channel's delivery tags start again at 1, so acknowledging a delivery received
// before it could acknowledge a different message, which would then be lost.
func NewSource(conn *amqp.Connection, cfg SourceConfig) (*Source, error) {
	cfg, err := brokerkit.Configure(checkConn(conn), cfg, SourceConfig.withDefaults)
	if err != nil {
		return nil, err
	}
	s := &Source{conn: conn, cfg: cfg, done: make(chan struct{}), pending: map[*settler]*time.Timer{}}
	if s.sess, err = s.open(); err != nil {
		return nil, &idem.BackendError{Backend: Backend, Op: "open", Err: err}
	}
	return s, nil
}

// Features reports the source's guarantees:
//   - Dedup is false: RabbitMQ has no dedup by message id.
//   - OrderedPerKey is true: one queue delivers to one consumer in publish order
//     (messages published on one channel). It holds for a single Source on the
//     queue while nothing is requeued; a Nak or a closed channel puts messages back
//     and they come again after later ones, and competing consumers each see a
//     subset.
//   - DelayedNak is true unless SourceConfig.MaxNakDelay is negative: Nak holds the
//     delivery unacknowledged for the delay, then requeues it (see Settler.Nak).
//   - Attempts is SourceConfig.Quorum: only quorum queues count deliveries.
func (s *Source) Features() idem.Features {
	return idem.Features{OrderedPerKey: true, DelayedNak: s.cfg.MaxNakDelay > 0, Attempts: s.cfg.Quorum}
}

// MessagingSystem is the messaging.system of the spans of the inbox that uses it:
// "rabbitmq".
func (s *Source) MessagingSystem() string { return "rabbitmq" }

// Receive blocks until at least one delivery is available or ctx ends, and returns
// at most max deliveries: the first, then whatever else has already arrived (at most
// SourceConfig.Prefetch are unsettled at once). After Close it returns
// idem.ErrClosed.
func (s *Source) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	if err := brokerkit.CheckReceive(ctx, max); err != nil {
		return nil, err
	}
	sess, err := s.session()
	if err != nil {
		return nil, err
	}
	var first amqp.Delivery
	select {
	case d, ok := <-sess.deliveries:
		if !ok {
			return nil, s.lost(sess)
		}
		first = d
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, idem.ErrClosed
	}
	out := []idem.Delivery{s.delivery(sess, first)} // grown as more are ready: most calls return few

more:
	for len(out) < max {
		select {
		case d, ok := <-sess.deliveries:
			if !ok {
				break more // the channel ended: checked below
			}
			out = append(out, s.delivery(sess, d))
		default:
			break more
		}
	}
	if sess.ch.IsClosed() || s.conn.IsClosed() { // the connection is marked closed before its channels
		// Deliveries that arrived before the channel died wait in the session's
		// buffer after it. None can be acknowledged now (a delivery tag belongs to
		// its channel) and the broker has requeued them all: handing them out would
		// only run their handlers for nothing and deliver each twice.
		return nil, s.lost(sess)
	}
	return out, nil
}

func (s *Source) delivery(sess *session, d amqp.Delivery) idem.Delivery {
	st := &settler{src: s, sess: sess, d: d, position: fmt.Sprintf("queue %s delivery tag %d", s.cfg.Queue, d.DeliveryTag)}
	return toDelivery(d, st.position, s.cfg.Quorum, st)
}

// session returns the consuming channel, opening a new one after a failure.
func (s *Source) session() (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, idem.ErrClosed
	}
	if s.sess == nil {
		sess, err := s.open()
		if err != nil {
			return nil, &idem.BackendError{Backend: Backend, Op: "receive", Err: err}
		}
		s.sess = sess
	}
	return s.sess, nil
}

// open opens a channel, sets its prefetch and starts consuming with manual acks.
func (s *Source) open() (*session, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open a channel: %w", err)
	}
	sess := &session{ch: ch, closes: ch.NotifyClose(make(chan *amqp.Error, 1))}
	if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("set prefetch %d: %w", s.cfg.Prefetch, err)
	}
	in, err := ch.Consume(s.cfg.Queue, s.cfg.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("consume from queue %q: %w", s.cfg.Queue, err)
	}
	out := make(chan amqp.Delivery, s.cfg.Prefetch)
	sess.deliveries = out
	go sess.count(in, out, s.done)
	return sess, nil
}

// count forwards the broker's deliveries from in to out, counting each as it
// arrives, so Lag knows what the channel holds before Receive hands it out. out
// has room for Prefetch deliveries, more than the broker sends unacknowledged, so
// count keeps up with the broker; it stops when in closes (the channel ended),
// draining it once the source closes.
func (sess *session) count(in <-chan amqp.Delivery, out chan<- amqp.Delivery, done <-chan struct{}) {
	defer close(out)
	for d := range in {
		sess.arrived.Add(1)
		select {
		case out <- d:
		case <-done:
			for range in { // until Close's channel close ends in: the client never waits on it
			}
			return
		}
	}
}

// lost handles the end of sess's delivery stream: the channel or connection died,
// or the broker cancelled the consumer. It drops sess (closing its channel, so the
// broker requeues what it still holds) and explains why in a retryable error.
func (s *Source) lost(sess *session) error {
	s.mu.Lock()
	closed := s.closed
	if s.sess == sess {
		s.sess = nil
	}
	s.mu.Unlock()
	if closed {
		return idem.ErrClosed
	}
	sess.failOnce.Do(func() {
		sess.failErr = s.whyLost(sess)
		_ = sess.ch.Close()
	})
	return &idem.BackendError{Backend: Backend, Op: "receive", Err: sess.failErr}
}

func (s *Source) whyLost(sess *session) error {
	select {
	case e, ok := <-sess.closes:
		if ok && e != nil {
			return fmt.Errorf("consuming queue %q: the channel closed: %w; unacknowledged deliveries are requeued", s.cfg.Queue, e)
		}
	default:
	}
	if s.conn.IsClosed() {
		return fmt.Errorf("consuming queue %q: the connection is closed (%w); unacknowledged deliveries are requeued; dial again and open a new source", s.cfg.Queue, amqp.ErrClosed)
	}
	if sess.ch.IsClosed() {
		return fmt.Errorf("consuming queue %q: the channel closed (%w); unacknowledged deliveries are requeued", s.cfg.Queue, amqp.ErrClosed)
	}
	return fmt.Errorf("consuming queue %q: the broker cancelled the consumer (was the queue deleted?); unacknowledged deliveries are requeued", s.cfg.Queue)
}

// Close stops consuming and closes the source's channel: the broker requeues every
// delivery not yet acknowledged, including those held by a delayed Nak, at once.
// Blocked and later Receive calls return idem.ErrClosed.
func (s *Source) Close() error {
	var sess *session
	brokerkit.CloseOnce(&s.mu, &s.closed, func() {
		close(s.done)
		for st, t := range s.pending {
			t.Stop()
			delete(s.pending, st)
		}
		sess, s.sess = s.sess, nil
	})
	if sess == nil {
		return nil
	}
	if err := sess.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) && !sess.ch.IsClosed() {
		return &idem.BackendError{Backend: Backend, Op: "close", Err: err}
	}
	return nil
}

// checkConn refuses connections the adapters cannot use. amqp091-go's automatic
// recovery reopens channels behind the adapters' backs: delivery tags start again at
// 1 (a stale ack would settle another message, which would be lost) and confirm
// bookkeeping restarts, while the adapters already replace a dead channel themselves
// and report the failure to the caller.
func checkConn(conn *amqp.Connection) error {
	if conn == nil {
		return &idem.InputError{Field: "conn", Reason: "is nil", Fix: "pass a connection from amqp.Dial"}
	}
	if conn.IsRecoveryEnabled() {
		return &idem.InputError{Field: "conn", Reason: "has automatic recovery enabled",
			Fix: "dial without amqp.Config.Recovery (use a separate connection for idemamqp): the adapters report a dead channel as a retryable error and open a new one"}
	}
	return nil
}
