package peers_test

import (
	"context"
	stdsql "database/sql"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// These tests pin two cases, found by reading watermill-sql v3.1.0's subscriber.go,
// in which its exactly-once mode applies a message's effects twice: when the message
// is not acked, Subscriber.query still COMMITs its transaction (err is nil), with the
// handler's writes in it and without the offset. The message is then read again and
// the handler writes again. Each test publishes one message and expects the ledger to
// hold 2 rows; a failure means watermill-sql's behaviour changed.

// wmEnv is one message on topic "t" of a fresh schema, a ledger, and subscribers of
// consumer group "g" reading one message per transaction.
type wmEnv struct {
	db     *stdsql.DB
	schema wmsql.DefaultPostgreSQLSchema
}

func newWMEnv(t *testing.T) wmEnv {
	db := schemaDB(t)
	if _, err := db.Exec("CREATE TABLE ledger (msg_id TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	e := wmEnv{db: db, schema: wmsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 1}}
	if err := e.subscriber(t, nil).SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	pub, err := wmsql.NewPublisher(db, wmsql.PublisherConfig{SchemaAdapter: e.schema}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("t", message.NewMessage("m-1", []byte("{}"))); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e wmEnv) subscriber(t *testing.T, ackDeadline *time.Duration) *wmsql.Subscriber {
	sub, err := wmsql.NewSubscriber(e.db, wmsql.SubscriberConfig{ConsumerGroup: "g", AckDeadline: ackDeadline,
		PollInterval: 10 * time.Millisecond, SchemaAdapter: e.schema, OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{}},
		watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

// write is the exactly-once handler's effect: one ledger row in the subscriber's tx.
func (e wmEnv) write(t *testing.T, msg *message.Message) {
	tx, ok := wmsql.TxFromContext(msg.Context())
	if !ok {
		t.Fatal("no transaction in the message's context")
	}
	if _, err := tx.ExecContext(context.Background(), "INSERT INTO ledger VALUES ($1)", msg.UUID); err != nil {
		t.Fatal(err)
	}
}

// consumeOne takes the next message from a new subscriber, writes, acks, and waits
// for the commit.
func (e wmEnv) consumeOne(t *testing.T) {
	ch, err := e.subscriber(t, nil).Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-ch:
		e.write(t, msg)
		msg.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("message not redelivered")
	}
	e.waitRows(t, 2)
}

func (e wmEnv) waitRows(t *testing.T, want int) {
	var n int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err := e.db.QueryRow("SELECT count(*) FROM ledger").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == want {
			t.Logf("one message, %d ledger rows", n)
			return
		}
	}
	t.Errorf("one message, %d ledger rows; watermill-sql applied it twice before (see the file comment)", n)
}

// TestWatermillAckAfterDeadline: the handler writes, then takes longer than
// AckDeadline before acking (a slow call after the write). sendMessage gives up on
// the message's context deadline, query commits the write without the offset, and
// the message comes again.
func TestWatermillAckAfterDeadline(t *testing.T) {
	e := newWMEnv(t)
	deadline := 200 * time.Millisecond
	ch, err := e.subscriber(t, &deadline).Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	msg := <-ch
	e.write(t, msg)
	time.Sleep(3 * deadline)
	msg.Ack() // too late
	select {
	case msg := <-ch: // the same message again, from the same subscriber
		e.write(t, msg)
		msg.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("message not redelivered")
	}
	e.waitRows(t, 2)
}

// TestWatermillCloseBeforeAck: Subscriber.Close while a handler has written but not
// yet acked (a shutdown). sendMessage returns on s.closing, query commits the write
// without the offset, and the next subscriber of the group gets the message again.
// (Cancelling the Subscribe context instead rolls back: the transaction was begun
// with that context.)
func TestWatermillCloseBeforeAck(t *testing.T) {
	e := newWMEnv(t)
	sub := e.subscriber(t, nil)
	ch, err := sub.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	e.write(t, <-ch)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	e.consumeOne(t)
}
