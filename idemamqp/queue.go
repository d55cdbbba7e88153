package idemamqp

import (
	"context"
	"fmt"

	"github.com/idemhq/idem"
	amqp "github.com/rabbitmq/amqp091-go"
)

// EnsureQueue declares a durable queue named name on a channel of its own, so that
// a refused declaration (an existing queue with other arguments closes the channel
// with 406 PRECONDITION_FAILED) does not take one of the caller's channels with it.
// Declaring a queue that exists with the same arguments does nothing. Durable,
// because a persistent message survives a broker restart only in a durable queue,
// and quorum queues must be durable. amqp091-go's declaration takes no context:
// ctx is checked before the channel opens.
func EnsureQueue(ctx context.Context, conn *amqp.Connection, name string, cfg QueueConfig) error {
	if conn == nil {
		return &idem.InputError{Field: "conn", Reason: "is nil", Fix: "pass a connection from amqp.Dial"}
	}
	if err := cfg.validate(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return &idem.BackendError{Backend: Backend, Op: "declare", Err: fmt.Errorf("open a channel: %w", err)}
	}
	defer func() { _ = ch.Close() }()
	if _, err := ch.QueueDeclare(name, true, false, false, false, cfg.args()); err != nil {
		return &idem.BackendError{Backend: Backend, Op: "declare", Err: fmt.Errorf("queue %q: %w", name, err)}
	}
	return nil
}

// args maps cfg to the queue's x-arguments.
func (cfg QueueConfig) args() amqp.Table {
	args := amqp.Table{}
	if cfg.Quorum {
		args[amqp.QueueTypeArg] = amqp.QueueTypeQuorum
	}
	if cfg.DeadLetterExchange != "" {
		args["x-dead-letter-exchange"] = cfg.DeadLetterExchange
	}
	if cfg.DeadLetterRoutingKey != "" {
		args["x-dead-letter-routing-key"] = cfg.DeadLetterRoutingKey
	}
	if cfg.DeliveryLimit > 0 {
		args["x-delivery-limit"] = int64(cfg.DeliveryLimit)
	}
	if len(args) == 0 {
		return nil
	}
	return args
}
