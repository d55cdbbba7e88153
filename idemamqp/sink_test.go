package idemamqp_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemamqp"
	"github.com/idemhq/idem/internal/testsvc"
	amqp "github.com/rabbitmq/amqp091-go"
)

// wantPublishError fails t unless err is a publish BackendError naming id.
func wantPublishError(t *testing.T, err error, id string) {
	t.Helper()
	wantRetryable(t, err, "publish")
	if !strings.Contains(err.Error(), `"`+id+`"`) {
		t.Fatalf("error %q does not name message %q", err, id)
	}
	t.Logf("%s: %v", id, err)
}

// wantAccepted fails t unless err is an *idem.PublishError saying exactly which
// messages of the batch the broker confirmed.
func wantAccepted(t *testing.T, err error, want ...bool) {
	t.Helper()
	var pe *idem.PublishError
	if !errors.As(err, &pe) || !slices.Equal(pe.Accepted, want) {
		t.Fatalf("error %v (%T): want an *idem.PublishError with Accepted %v", err, err, want)
	}
}

// Publisher confirms are observed: a publish to a missing exchange fails (the broker
// closes the channel) instead of passing silently, and the sink recovers on a new
// channel for the next call.
func TestPublishToMissingExchange(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	sink := newSink(t, conn, idemamqp.SinkConfig{Exchange: testsvc.UniqueName("idemtest-missing-")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 { // the second call runs on a new channel and fails the same way
		err := sink.Publish(ctx, idem.Message{ID: "lost-1", Topic: "k", Payload: []byte("x")}, idem.Message{ID: "lost-2", Topic: "k", Payload: []byte("x")})
		wantPublishError(t, err, "lost-1")
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
			t.Fatalf("error %v does not wrap the broker's 404", err)
		}
	}
	queue := declareQueue(t, idemamqp.QueueConfig{})
	publish(t, newSink(t, conn, idemamqp.SinkConfig{}), idem.Message{ID: "ok", Topic: queue, Payload: []byte("x")})
}

// With Mandatory, a message no queue receives fails Publish; the routable messages of
// the same batch are delivered. Without it, RabbitMQ confirms and drops it.
func TestMandatoryUnroutable(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	queue := declareQueue(t, idemamqp.QueueConfig{})
	nowhere := testsvc.UniqueName("idemtest-nowhere-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sink := newSink(t, conn, idemamqp.SinkConfig{Mandatory: true})
	err := sink.Publish(ctx,
		idem.Message{ID: "routed", Topic: queue, Payload: []byte("1")},
		idem.Message{ID: "unrouted", Topic: nowhere, Payload: []byte("2")},
		idem.Message{ID: "routed-too", Topic: queue, Payload: []byte("3")})
	wantPublishError(t, err, "unrouted")
	wantAccepted(t, err, true, false, true) // the relay marks the routed two and sends the third again
	if !errors.Is(err, idemamqp.ErrUnroutable) {
		t.Fatalf("error %v does not wrap ErrUnroutable", err)
	}
	got := receive(t, newSource(t, conn, idemamqp.SourceConfig{Queue: queue}), 2, 30*time.Second)
	if len(got) != 2 || got[0].ID != "routed" || got[1].ID != "routed-too" {
		t.Fatalf("routable messages of the batch: got %d", len(got))
	}
	ack(t, got...)
	publish(t, sink, idem.Message{ID: "after", Topic: queue, Payload: []byte("4")}) // the channel is still good

	if err := newSink(t, conn, idemamqp.SinkConfig{}).Publish(ctx, idem.Message{ID: "dropped", Topic: nowhere, Payload: []byte("x")}); err != nil {
		t.Fatalf("without Mandatory, an unroutable message is confirmed by RabbitMQ; Publish = %v", err)
	}
}

// A broker nack fails Publish naming the message: a queue that rejects publishes
// when full nacks the second of two messages.
func TestNackedByBroker(t *testing.T) {
	t.Parallel()
	queue := declareRaw(t, idemamqp.QueueConfig{}, amqp.Table{amqp.QueueMaxLenArg: int64(1), amqp.QueueOverflowArg: amqp.QueueOverflowRejectPublish})
	sink := newSink(t, dial(t), idemamqp.SinkConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := sink.Publish(ctx, idem.Message{ID: "fits", Topic: queue, Payload: []byte("1")}, idem.Message{ID: "overflows", Topic: queue, Payload: []byte("2")})
	wantPublishError(t, err, "overflows")
	wantAccepted(t, err, true, false)
	if !errors.Is(err, idemamqp.ErrNacked) {
		t.Fatalf("error %v does not wrap ErrNacked", err)
	}
}

// Large batches go out in confirm windows; all of them arrive, in order.
func TestPublishLargeBatch(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	queue := declareQueue(t, idemamqp.QueueConfig{})
	const n = 1000
	msgs := make([]idem.Message, n)
	for i := range msgs {
		msgs[i] = idem.Message{ID: fmt.Sprintf("m-%04d", i), Topic: queue, Payload: []byte(strconv.Itoa(i))}
	}
	publish(t, newSink(t, conn, idemamqp.SinkConfig{Mandatory: true}), msgs...)
	got := receiveN(t, newSource(t, conn, idemamqp.SourceConfig{Queue: queue, Prefetch: n}), n)
	for i, d := range got {
		if d.ID != msgs[i].ID {
			t.Fatalf("delivery %d is %s, want %s", i, d.ID, msgs[i].ID)
		}
	}
	ack(t, got...)
}

// Input AMQP cannot carry is refused before anything is sent: amqp091-go would tear
// down the whole connection trying to encode it.
func TestPublishRefusesBadInput(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	queue := declareQueue(t, idemamqp.QueueConfig{})
	sink := newSink(t, conn, idemamqp.SinkConfig{})
	long := strings.Repeat("k", 256)
	for _, m := range []idem.Message{
		{ID: "x", Topic: long, Payload: []byte("x")},
		{ID: "x", Topic: queue, Headers: map[string]string{long: "v"}, Payload: []byte("x")},
	} {
		err := sink.Publish(context.Background(), idem.Message{ID: "good", Topic: queue, Payload: []byte("x")}, m)
		if !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("Publish(topic %d bytes, %d headers) = %v, want idem.ErrInvalid", len(m.Topic), len(m.Headers), err)
		}
	}
	if conn.IsClosed() {
		t.Fatal("the connection closed")
	}
	if extra := receive(t, newSource(t, conn, idemamqp.SourceConfig{Queue: queue}), 1, time.Second); len(extra) != 0 {
		t.Fatalf("a refused batch published %s", extra[0].ID)
	}
	if _, err := idemamqp.NewSink(conn, idemamqp.SinkConfig{Exchange: long}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("NewSink with a 256-byte exchange = %v, want idem.ErrInvalid", err)
	}
	closed := newSink(t, conn, idemamqp.SinkConfig{})
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	if err := closed.Publish(context.Background(), idem.Message{ID: "x", Topic: queue, Payload: []byte("x")}); !errors.Is(err, idem.ErrClosed) {
		t.Errorf("Publish after Close = %v, want idem.ErrClosed", err)
	}
}

// A connection that dies under a sink fails Publish with a retryable error rather
// than a hang or a silent success.
func TestPublishOnDeadConnection(t *testing.T) {
	t.Parallel()
	queue := declareQueue(t, idemamqp.QueueConfig{})
	conn := dialCuttable(t)
	sink := newSink(t, conn.Connection, idemamqp.SinkConfig{})
	publish(t, sink, idem.Message{ID: "before", Topic: queue, Payload: []byte("x")})
	conn.cut()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 {
		err := sink.Publish(ctx, idem.Message{ID: "after", Topic: queue, Payload: []byte("x")})
		if ctx.Err() != nil {
			t.Fatal("Publish blocked until its deadline after the connection died")
		}
		wantRetryable(t, err, "publish")
		t.Logf("%v", err)
	}
}
