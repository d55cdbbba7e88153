package idemamqp

import (
	"context"
	"fmt"

	"github.com/idemhq/idem"
	amqp "github.com/rabbitmq/amqp091-go"
)

var _ idem.LagReporter = (*Source)(nil)

// Lag is the queue's ready messages, as a passive queue.declare on a channel of
// its own reports them, plus the deliveries this source's channel holds
// unacknowledged: sent by the broker (received, or waiting in the client for
// Receive) and not yet acked or nacked, including those a delayed Nak holds.
//
// AMQP reports no unacknowledged count for a queue (RabbitMQ's management API
// does; the adapter does not call it), so deliveries held by other consumers of
// the queue (other sources, other processes) are not counted: with one Source per
// queue, Lag is exact; with several, each reports the ready messages plus its own,
// and their sum counts the ready messages once per source. A delivery the broker
// has sent that has not reached the client yet is briefly counted by neither.
func (s *Source) Lag(ctx context.Context) (idem.Lag, error) {
	if err := ctx.Err(); err != nil {
		return idem.Lag{}, err
	}
	type result struct {
		q   amqp.Queue
		err error
	}
	done := make(chan result, 1)
	go func() { // amqp091 takes no ctx: the caller's returns when ctx ends, this when the broker answers
		q, err := s.declarePassive()
		done <- result{q, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return idem.Lag{}, ctx.Err()
	}
	if r.err != nil {
		return idem.Lag{}, &idem.BackendError{Backend: Backend, Op: "lag", Err: r.err}
	}
	held := int64(0)
	s.mu.Lock()
	if sess := s.sess; sess != nil {
		held = sess.arrived.Load() - sess.settled.Load()
	}
	s.mu.Unlock()
	return idem.Lag{Messages: int64(r.q.Messages) + held}, nil
}

// declarePassive asks for the queue's counts on a channel opened for it: a
// passive declare of a missing queue closes its channel, which must not be the
// consuming one.
func (s *Source) declarePassive() (amqp.Queue, error) {
	ch, err := s.conn.Channel()
	if err != nil {
		return amqp.Queue{}, fmt.Errorf("open a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(s.cfg.Queue, false, false, false, false, nil)
	if err != nil {
		return amqp.Queue{}, fmt.Errorf("passive declare of queue %q: %w", s.cfg.Queue, err)
	}
	return q, nil
}
