package idemamqp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemamqp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// wantRetryable fails t unless err is a retryable *idem.BackendError of op.
func wantRetryable(t *testing.T, err error, op string) {
	t.Helper()
	var be *idem.BackendError
	if !errors.As(err, &be) || be.Backend != idemamqp.Backend || be.Op != op || !idem.IsRetryable(err) {
		t.Fatalf("got %v (%T); want a retryable *idem.BackendError{Backend: %q, Op: %q}", err, err, idemamqp.Backend, op)
	}
}

// A connection that dies while a delivery is unacknowledged: Receive reports it as a
// retryable error instead of blocking, and the broker gives the message to the next
// consumer, counted as a second attempt on a quorum queue. The deliveries that
// had arrived behind it are not handed out after the death (their acks would fail
// and the broker redelivers them anyway): they come again, to the next consumer.
func TestConnectionDiesMidStream(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		quorum bool
		kill   func(*cuttable)
	}{
		{"socket cut/classic", false, (*cuttable).cut},
		{"socket cut/quorum", true, (*cuttable).cut},
		{"connection closed/quorum", true, func(c *cuttable) { _ = c.Close() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			queue := declareQueue(t, idemamqp.QueueConfig{Quorum: tt.quorum})
			admin := dial(t)
			const n = 4
			var msgs []idem.Message
			for i := range n {
				msgs = append(msgs, idem.Message{ID: fmt.Sprintf("m-%d", i+1), Topic: queue, Payload: []byte("1")})
			}
			publish(t, newSink(t, admin, idemamqp.SinkConfig{Mandatory: true}), msgs...)

			victim := dialCuttable(t)
			cfg := idemamqp.SourceConfig{Queue: queue, Quorum: tt.quorum}
			src := newSource(t, victim.Connection, cfg)
			got := receiveN(t, src, 1)
			waitArrived(t, src, n) // the other three wait in the source, not yet handed out
			died := victim.NotifyClose(make(chan *amqp.Error, 1))
			tt.kill(victim)
			// A cut socket is noticed by the client's reader a moment later: from
			// then on, the source knows its channel is dead.
			select {
			case <-died:
			case <-time.After(30 * time.Second):
				t.Fatal("the client did not notice its connection's death within 30s")
			}

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ds, err := src.Receive(ctx, 10)
			if ctx.Err() != nil {
				t.Fatal("Receive blocked until its deadline after the connection died")
			}
			if len(ds) != 0 {
				t.Fatalf("Receive after the connection died returned %d deliveries", len(ds))
			}
			wantRetryable(t, err, "receive")
			_, err = src.Receive(ctx, 10) // the connection is gone: reopening fails, promptly
			wantRetryable(t, err, "receive")
			wantRetryable(t, got[0].Settler.Ack(ctx), "ack")

			again := receive(t, newSource(t, admin, cfg), n, 30*time.Second)
			if len(again) != n {
				t.Fatalf("%d of the %d unacknowledged messages were redelivered to a new source", len(again), n)
			}
			for _, d := range again {
				if d.ID == got[0].ID && tt.quorum && d.Attempt < 2 {
					t.Errorf("redelivery of %s has Attempt %d, want at least 2", d.ID, d.Attempt)
				}
			}
			ack(t, again...)
		})
	}
}

// A consumer the broker cancels (its queue was deleted) ends Receive with a
// retryable error too, and the next Receive tries to consume again.
func TestQueueDeletedUnderConsumer(t *testing.T) {
	t.Parallel()
	queue := declareQueue(t, idemamqp.QueueConfig{})
	src := newSource(t, dial(t), idemamqp.SourceConfig{Queue: queue})
	deleteQueue(t, queue)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := src.Receive(ctx, 1)
	wantRetryable(t, err, "receive")
	if !strings.Contains(err.Error(), "cancelled") && !strings.Contains(err.Error(), "closed") {
		t.Errorf("error %q does not say why the consumer ended", err)
	}
	_, err = src.Receive(ctx, 1) // consuming a missing queue fails: 404
	var ae *amqp.Error
	if wantRetryable(t, err, "receive"); !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		t.Errorf("Receive on a deleted queue = %v, want it to wrap the broker's 404", err)
	}
}

// Nak with a delay holds the delivery: it does not come back before the delay, and
// a source closed in the meantime lets the broker requeue it at once.
func TestDelayedNak(t *testing.T) {
	t.Parallel()
	queue := declareQueue(t, idemamqp.QueueConfig{})
	conn := dial(t)
	publish(t, newSink(t, conn, idemamqp.SinkConfig{}), idem.Message{ID: "late", Topic: queue, Payload: []byte("x")})
	src := newSource(t, conn, idemamqp.SourceConfig{Queue: queue})
	if !src.Features().DelayedNak {
		t.Fatal("Features().DelayedNak is false with the default MaxNakDelay")
	}
	got := receiveN(t, src, 1)
	if err := got[0].Settler.Nak(context.Background(), time.Hour); err != nil { // capped at a minute
		t.Fatalf("Nak: %v", err)
	}
	if early := receive(t, src, 1, 500*time.Millisecond); len(early) != 0 {
		t.Fatalf("Nak(1h) redelivered %s at once", early[0].ID)
	}
	if err := src.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	again := receive(t, newSource(t, conn, idemamqp.SourceConfig{Queue: queue}), 1, 30*time.Second)
	if len(again) != 1 || again[0].ID != "late" {
		t.Fatal("after Close, the message held by a delayed Nak was not redelivered")
	}
	ack(t, again...)
}

// With delays turned off, Nak requeues at once whatever the delay.
func TestNakWithoutDelay(t *testing.T) {
	t.Parallel()
	queue := declareQueue(t, idemamqp.QueueConfig{Quorum: true})
	conn := dial(t)
	publish(t, newSink(t, conn, idemamqp.SinkConfig{}), idem.Message{ID: "now", Topic: queue, Payload: []byte("x")})
	src := newSource(t, conn, idemamqp.SourceConfig{Queue: queue, Quorum: true, MaxNakDelay: -1})
	if src.Features().DelayedNak {
		t.Fatal("Features().DelayedNak is true with MaxNakDelay < 0")
	}
	got := receive(t, src, 1, 30*time.Second)
	if len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("first delivery: %+v", got)
	}
	if err := got[0].Settler.Nak(context.Background(), time.Hour); err != nil {
		t.Fatalf("Nak: %v", err)
	}
	again := receive(t, src, 1, 30*time.Second)
	if len(again) != 1 || again[0].ID != "now" || again[0].Attempt != 2 {
		t.Fatalf("after Nak, got %+v; want the message again with Attempt 2", again)
	}
	ack(t, again...)
}

// Settling twice would make the broker close the channel (unknown delivery tag) and
// requeue every other delivery on it; the second settlement is refused instead.
func TestSettleTwice(t *testing.T) {
	t.Parallel()
	queue := declareQueue(t, idemamqp.QueueConfig{})
	conn := dial(t)
	sink := newSink(t, conn, idemamqp.SinkConfig{})
	publish(t, sink, idem.Message{ID: "a", Topic: queue, Payload: []byte("a")})
	src := newSource(t, conn, idemamqp.SourceConfig{Queue: queue})
	got := receiveN(t, src, 1)
	ack(t, got...)
	if err := got[0].Settler.Ack(context.Background()); !errors.Is(err, idem.ErrInvalid) {
		t.Fatalf("second Ack = %v, want idem.ErrInvalid", err)
	}
	if err := got[0].Settler.Nak(context.Background(), 0); !errors.Is(err, idem.ErrInvalid) {
		t.Fatalf("Nak after Ack = %v, want idem.ErrInvalid", err)
	}
	publish(t, sink, idem.Message{ID: "b", Topic: queue, Payload: []byte("b")})
	if next := receive(t, src, 1, 30*time.Second); len(next) != 1 || next[0].ID != "b" {
		t.Fatal("the source stopped working after a refused second settlement")
	} else {
		ack(t, next...)
	}
}

// Messages from other producers: the id from the idem.HeaderID header when there is
// no message-id, delivered with an empty ID when there is neither, and non-string
// headers formatted rather than dropped.
func TestForeignMessages(t *testing.T) {
	t.Parallel()
	queue := declareQueue(t, idemamqp.QueueConfig{})
	conn := dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []amqp.Publishing{
		{Headers: amqp.Table{idem.HeaderID: "from-header", "n": int32(42), "ok": true}, Body: []byte("1")},
		{Body: []byte("2")},
	} {
		if err := ch.Publish("", queue, false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	got := receiveN(t, newSource(t, conn, idemamqp.SourceConfig{Queue: queue}), 2)
	if d := got[0]; d.ID != "from-header" || d.Headers["n"] != "42" || d.Headers["ok"] != "true" || d.Topic != queue {
		t.Errorf("first message: %+v", d.Message)
	}
	if _, ok := got[0].Headers[idem.HeaderID]; ok {
		t.Errorf("the id header is still among the headers: %v", got[0].Headers)
	}
	if d := got[1]; d.ID != "" || string(d.Payload) != "2" {
		t.Errorf("a message without id: %+v; want it delivered with an empty ID", d.Message)
	}
	if !strings.Contains(got[0].Position, queue) || !strings.Contains(got[0].Position, "delivery tag") {
		t.Errorf("Position %q does not name the queue and delivery tag", got[0].Position)
	}
	ack(t, got...)
}

func TestConstructorsRefuse(t *testing.T) {
	t.Parallel()
	reach(t)
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Recovery: &amqp.Recovery{}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := idemamqp.NewSource(conn, idemamqp.SourceConfig{Queue: "q"}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("NewSource on a recovering connection = %v, want idem.ErrInvalid", err)
	}
	if _, err := idemamqp.NewSink(conn, idemamqp.SinkConfig{}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("NewSink on a recovering connection = %v, want idem.ErrInvalid", err)
	}
	plain := dial(t)
	if _, err := idemamqp.NewSource(plain, idemamqp.SourceConfig{}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("NewSource without a queue = %v, want idem.ErrInvalid", err)
	}
	_, err = idemamqp.NewSource(plain, idemamqp.SourceConfig{Queue: "idemtest-missing-queue"})
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		t.Errorf("NewSource on a missing queue = %v, want the broker's 404", err)
	}
}

// waitArrived waits until n deliveries have reached src from the broker, handed
// out or not.
func waitArrived(t *testing.T, src *idemamqp.Source, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for idemamqp.Arrived(src) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries reached the source within 30s", idemamqp.Arrived(src), n)
		}
		time.Sleep(time.Millisecond)
	}
}
