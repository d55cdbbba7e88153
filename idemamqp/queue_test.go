package idemamqp_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemamqp"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestEnsureQueue(t *testing.T) {
	t.Parallel()
	cfg := idemamqp.QueueConfig{Quorum: true, DeliveryLimit: 50, DeadLetterExchange: "amq.fanout", DeadLetterRoutingKey: "dead"}
	queue := declareQueue(t, cfg)
	conn := dial(t)
	if err := idemamqp.EnsureQueue(context.Background(), conn, queue, cfg); err != nil {
		t.Fatalf("declaring the same queue again: %v", err)
	}
	err := idemamqp.EnsureQueue(context.Background(), conn, queue, idemamqp.QueueConfig{}) // a classic queue of the same name
	var ae *amqp.Error
	var be *idem.BackendError
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed || !errors.As(err, &be) || be.Op != "declare" {
		t.Fatalf("redeclaring a quorum queue as classic = %v, want the broker's 406 in a BackendError", err)
	}
	if conn.IsClosed() {
		t.Fatal("a refused declaration closed the connection")
	}
	if err := idemamqp.EnsureQueue(context.Background(), conn, "", idemamqp.QueueConfig{}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("EnsureQueue without a name = %v, want idem.ErrInvalid", err)
	}
	if err := idemamqp.EnsureQueue(context.Background(), nil, queue, idemamqp.QueueConfig{}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("EnsureQueue without a connection = %v, want idem.ErrInvalid", err)
	}
}
