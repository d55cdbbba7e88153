package idemsqs_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqs"
	"github.com/idemhq/idem/idemsqs/sqsfake"
	"github.com/idemhq/idem/idemtest"
)

// TestDedupWindowThenInbox: SQS's own dedup drops a republish within its fixed
// 5-minute window; the inbox's key catches what the window does not: the same
// message republished after the window (the fake's clock is moved past it), and a
// copy another producer sent with a different MessageDeduplicationId. Each reaches
// the consumer, and the effect happens once.
func TestDedupWindowThenInbox(t *testing.T) {
	t.Parallel()
	var skew atomic.Int64
	srv := startFake(t, sqsfake.Config{Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	f := setup(t, srv, idemsqs.QueueConfig{})
	order := idem.Message{ID: "order-1-placed", Topic: f.queue, OrderingKey: "order-1", Payload: []byte(`{"amount":5}`)}

	idemtest.Publish(t, f.sink, order)
	skew.Store(int64(idemsqs.DedupWindow - time.Second)) // 4m59s later: within the window
	idemtest.Publish(t, f.sink, order, idem.Message{ID: "order-2-placed", Topic: f.queue, OrderingKey: "order-2", Payload: []byte(`{"amount":7}`)})

	l := newLedger(t, f.source(t, idemsqs.SourceConfig{}))
	l.runUntil(t, "both orders applied", func() bool { return l.rows(t, "order-2-placed") == 1 && l.rows(t, "order-1-placed") == 1 })
	l.runUntil(t, "the queue drained", func() bool { return settledQueue(t, f.c, f.url) })
	if n := l.src.count(order.ID); n != 1 {
		t.Fatalf("within the window SQS delivered %s %d times, want 1 (its dedup dropped the republish)", order.ID, n)
	}

	skew.Store(int64(idemsqs.DedupWindow + time.Second)) // past the window of the first send
	idemtest.Publish(t, f.sink, order)
	// Another producer's copy: same idem id, its own MessageDeduplicationId.
	sendRaw(t, f.c, f.url, `{"amount":5}`, "another-dedup-id", "order-1",
		map[string]types.MessageAttributeValue{idem.HeaderID: str(order.ID)})

	l.runUntil(t, "both copies delivered and settled", func() bool { return l.src.count(order.ID) == 3 && settledQueue(t, f.c, f.url) })
	if n := l.rows(t, order.ID); n != 1 {
		t.Fatalf("%s delivered 3 times (once within the window, once after it, once under another dedup id) was applied %d times, want 1", order.ID, n)
	}
}

// TestHashedIDsDedup: an ID or ordering key SQS cannot take as a dedup id or group
// id (too long, not ASCII) travels hashed, and the ID comes back whole: a republish
// within the window is still dropped.
func TestHashedIDsDedup(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, idemsqs.QueueConfig{})
	long := "commande-é-" + time.Now().Format(time.RFC3339Nano)
	for len(long) < 200 {
		long += "-ü"
	}
	m := idem.Message{ID: long, Topic: f.queue, OrderingKey: "clé de commande", Payload: []byte{0, 0xff, 'b', 'i', 'n'},
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	empty := idem.Message{ID: "empty payload", Topic: f.queue, OrderingKey: m.OrderingKey}
	idemtest.Publish(t, f.sink, m, m, empty)
	src := f.source(t, idemsqs.SourceConfig{})
	got := idemtest.ReceiveN(t, src, 2)
	idemtest.Ack(t, got...)
	if extra := idemtest.Receive(t, src, 1, time.Second); len(extra) != 0 {
		t.Fatalf("the republish of a hashed id was delivered too: %q", extra[0].ID)
	}
	if d := got[0]; d.ID != m.ID || string(d.Payload) != string(m.Payload) || d.Headers["traceparent"] != m.Headers["traceparent"] || len(d.Headers) != 1 {
		t.Fatalf("got %q %q %v, want %q %q %v", d.ID, d.Payload, d.Headers, m.ID, m.Payload, m.Headers)
	}
	if d := got[1]; d.ID != empty.ID || d.Payload == nil || len(d.Payload) != 0 || d.Headers != nil {
		t.Fatalf("empty payload came back as ID %q payload %q headers %v", d.ID, d.Payload, d.Headers)
	}
}
