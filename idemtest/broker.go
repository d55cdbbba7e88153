package idemtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// BrokerEnv is one fresh destination on the broker under test: a topic (subject,
// stream, queue) no other test uses, a sink publishing to it and a way to open
// sources on it. Sources opened from one env are competing consumers of one group:
// each message goes to one of them.
type BrokerEnv struct {
	Topic     string
	Sink      idem.Sink
	NewSource func(t *testing.T) idem.Source // closed by the suite or at cleanup
	Features  idem.Features
	// Redelivery bounds how long an unacknowledged message may take to come back
	// after its source closed (ack wait, min idle time): the suite waits this long,
	// plus a margin, before it calls a message lost. 30 s when zero.
	Redelivery time.Duration
	// InFlightPerKey, if set, is how many unsettled messages of one ordering key the
	// broker hands out before earlier ones are settled (SQS FIFO: one receive of at
	// most 10 per message group). Where the suite receives more of one key, it then
	// acknowledges each receive before the next.
	InFlightPerKey int
	// LagApproximate says the source's Lag (idem.LagReporter) is the broker's
	// estimate (SQS's approximate counts): the suite then asks it to reach at least
	// the number of messages published, and 0 after they are acknowledged, not
	// exactly that number.
	LagApproximate bool
}

// BrokerSuite runs the Source/Sink contract against a broker adapter: every adapter
// runs it unchanged, and it checks a Features promise only where the adapter makes it.
// Where the adapter's Source implements idem.LagReporter, "Lag" checks that Lag
// counts published messages not yet acknowledged (exactly, unless
// BrokerEnv.LagApproximate) and comes back to 0 once they are; elsewhere it skips.
func BrokerSuite(t *testing.T, newEnv func(t *testing.T) BrokerEnv) {
	runParallel(t, newEnv, []subtest[BrokerEnv]{
		{"PublishReceiveAck", testBrokerPublishReceive},
		{"UnackedIsRedelivered", testBrokerUnacked},
		{"NakIsRedelivered", testBrokerNak},
		{"RepublishedIDReachesConsumer", testBrokerRepublish},
		{"OrderPerKey", testBrokerOrder},
		{"BadMessageRefused", testBrokerBadInput},
		{"CancelledReceive", testBrokerCancelled},
		{"ClosedSource", testBrokerClosed},
		{"TraceContextSurvives", testBrokerTraceContext},
		{"DeadlineSurvives", testBrokerDeadline},
		{"SettleTwice", testBrokerSettleTwice},
		{"NakZeroIsRedelivered", testBrokerNakZero},
		{"DelayedNak", testBrokerDelayedNak},
		{"Attempts", testBrokerAttempts},
		{"CloseWithUnsettled", testBrokerCloseUnsettled},
		{"ConcurrentReceive", testBrokerConcurrentReceive},
		{"Lag", testBrokerLag},
	})
}

func brokerMsg(env BrokerEnv, i int) idem.Message {
	return idem.Message{ID: fmt.Sprintf("msg-%04d", i), Topic: env.Topic, OrderingKey: "k",
		Headers: map[string]string{"n": fmt.Sprint(i)}, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
}

// publishN publishes n messages under one ordering key and receives them from a new
// source, returning what was published, the source and what arrived.
func publishN(t *testing.T, env BrokerEnv, n int) ([]idem.Message, idem.Source, []idem.Delivery) {
	t.Helper()
	msgs := make([]idem.Message, n)
	for i := range msgs {
		msgs[i] = brokerMsg(env, i)
	}
	Publish(t, env.Sink, msgs...)
	src := env.NewSource(t)
	if env.InFlightPerKey == 0 || n <= env.InFlightPerKey {
		return msgs, src, Receive(t, src, n, env.wait())
	}
	var got []idem.Delivery
	for len(got) < n {
		ds := Receive(t, src, 1, env.wait()) // returns what one receive brought, at least 1
		if len(ds) == 0 {
			break
		}
		Ack(t, ds...)
		for i := range ds {
			ds[i].Settler = settled{} // the caller's Ack of the whole lot is then a no-op
		}
		got = append(got, ds...)
	}
	return msgs, src, got
}

// settled stands in for the settler of a delivery publishN already acknowledged.
type settled struct{}

func (settled) Ack(context.Context) error                { return nil }
func (settled) Nak(context.Context, time.Duration) error { return nil }

func (env BrokerEnv) wait() time.Duration {
	if env.Redelivery == 0 {
		return 30 * time.Second
	}
	return env.Redelivery + 15*time.Second
}

// Receive receives from src until n deliveries arrived or within passed, and returns
// what arrived; a Receive error other than the deadline fails t.
func Receive(t testing.TB, src idem.Source, n int, within time.Duration) []idem.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var got []idem.Delivery
	for len(got) < n {
		ds, err := src.Receive(ctx, n-len(got))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatalf("Receive: %v", err)
		}
		got = append(got, ds...)
	}
	return got
}

// Ack acknowledges ds, failing t on an error.
func Ack(t testing.TB, ds ...idem.Delivery) {
	t.Helper()
	for _, d := range ds {
		if err := d.Settler.Ack(context.Background()); err != nil {
			t.Fatalf("Ack %s (%s): %v", d.ID, d.Position, err)
		}
	}
}

// ReceiveN receives n deliveries from src, failing t unless all of them arrived
// within 30 s.
func ReceiveN(t testing.TB, src idem.Source, n int) []idem.Delivery {
	t.Helper()
	got := Receive(t, src, n, 30*time.Second)
	if len(got) != n {
		t.Fatalf("received %d of %d deliveries within 30s", len(got), n)
	}
	return got
}

// ReceiveAck receives n deliveries from src, at most batch per Receive, and
// acknowledges each, failing tb on an error. It has no deadline: it is the consuming
// half of a benchmark, whose caller bounds it.
func ReceiveAck(tb testing.TB, src idem.Source, n, batch int) {
	tb.Helper()
	ctx := context.Background()
	for got := 0; got < n; {
		ds, err := src.Receive(ctx, min(batch, n-got))
		if err != nil {
			tb.Fatal(err)
		}
		for _, d := range ds {
			if err := d.Settler.Ack(ctx); err != nil {
				tb.Fatal(err)
			}
		}
		got += len(ds)
	}
}

// Opened takes what a constructor returned: it fails t on err, and closes c when t
// ends.
func Opened[C io.Closer](t testing.TB, c C, err error) C {
	t.Helper()
	if err != nil {
		t.Fatalf("open %T: %v", c, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Publish publishes msgs to sink within 30 s, failing t on an error.
func Publish(t testing.TB, sink idem.Sink, msgs ...idem.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sink.Publish(ctx, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

func testBrokerPublishReceive(t *testing.T, env BrokerEnv) {
	const n = 20
	msgs, src, got := publishN(t, env, n)
	if len(got) != n {
		t.Fatalf("received %d of %d messages", len(got), n)
	}
	for _, d := range got {
		var want idem.Message
		for _, m := range msgs {
			if m.ID == d.ID {
				want = m
			}
		}
		if want.ID == "" || string(d.Payload) != string(want.Payload) || d.Headers["n"] != want.Headers["n"] || d.Topic == "" {
			t.Fatalf("delivery %+v does not match a published message (ID, payload, header n, topic)", d.Message)
		}
		if env.Features.Attempts && d.Attempt != 1 {
			t.Errorf("first delivery of %s has Attempt %d, want 1", d.ID, d.Attempt)
		}
	}
	Ack(t, got...)
	if extra := Receive(t, src, 1, 2*time.Second); len(extra) != 0 {
		t.Fatalf("after acking everything, %s was delivered again at once", extra[0].ID)
	}
}

func testBrokerUnacked(t *testing.T, env BrokerEnv) {
	Publish(t, env.Sink, brokerMsg(env, 1), brokerMsg(env, 2))
	first := env.NewSource(t)
	got := Receive(t, first, 2, env.wait())
	if len(got) != 2 {
		t.Fatalf("received %d of 2", len(got))
	}
	Ack(t, got[:1]...) // the consumer crashes before acking the second
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	second := env.NewSource(t)
	again := Receive(t, second, 1, env.wait())
	if len(again) != 1 || again[0].ID != got[1].ID {
		t.Fatalf("after the crash, redelivered %v; want exactly the unacked %s", ids(again), got[1].ID)
	}
	if env.Features.Attempts && again[0].Attempt < 2 {
		t.Errorf("redelivery has Attempt %d, want at least 2", again[0].Attempt)
	}
	Ack(t, again...)
}

func testBrokerNak(t *testing.T, env BrokerEnv) { nakIsRedelivered(t, env, 100*time.Millisecond) }

// testBrokerNakZero: a Nak without a delay hands the message back at once, on
// every adapter.
func testBrokerNakZero(t *testing.T, env BrokerEnv) { nakIsRedelivered(t, env, 0) }

// nakIsRedelivered: a message Nak'ed with delay comes back to the same source.
func nakIsRedelivered(t *testing.T, env BrokerEnv, delay time.Duration) {
	Publish(t, env.Sink, brokerMsg(env, 1))
	src := env.NewSource(t)
	got := Receive(t, src, 1, env.wait())
	if len(got) != 1 {
		t.Fatal("message not received")
	}
	if err := got[0].Settler.Nak(context.Background(), delay); err != nil {
		t.Fatalf("Nak(%v): %v", delay, err)
	}
	again := Receive(t, src, 1, env.wait())
	if len(again) != 1 || again[0].ID != got[0].ID {
		t.Fatalf("after Nak(%v), received %v; want %s again", delay, ids(again), got[0].ID)
	}
	Ack(t, again...)
}

// testBrokerRepublish: an outbox relay that crashes after publishing republishes the
// same ID. Where the broker deduplicates, the consumer sees it once; elsewhere the
// consumer sees it twice with the same ID, which is what its inbox deduplicates on.
func testBrokerRepublish(t *testing.T, env BrokerEnv) {
	m := brokerMsg(env, 7)
	Publish(t, env.Sink, m)
	Publish(t, env.Sink, m)
	Publish(t, env.Sink, brokerMsg(env, 8)) // a marker: once it is in, the duplicate would be too
	src := env.NewSource(t)
	want := 3
	if env.Features.Dedup {
		want = 2
	}
	got := Receive(t, src, want, env.wait())
	Ack(t, got...)
	got = append(got, Receive(t, src, 1, 2*time.Second)...)
	n := 0
	for _, d := range got {
		if d.ID == m.ID {
			n++
		}
	}
	if env.Features.Dedup && n != 1 {
		t.Fatalf("the broker deduplicates, yet %s was delivered %d times", m.ID, n)
	}
	if !env.Features.Dedup && n != 2 {
		t.Fatalf("%s published twice was delivered %d times; want 2, each with its ID for the inbox", m.ID, n)
	}
}

func testBrokerOrder(t *testing.T, env BrokerEnv) {
	if !env.Features.OrderedPerKey {
		t.Skip("the adapter does not promise order")
	}
	msgs, _, got := publishN(t, env, 50)
	Ack(t, got...)
	if want := ids(deliveriesOf(msgs)); !slices.Equal(ids(got), want) {
		t.Fatalf("order per key: got %v, want %v", ids(got), want)
	}
}

func testBrokerBadInput(t *testing.T, env BrokerEnv) {
	ctx := context.Background()
	for _, m := range []idem.Message{
		{ID: "", Topic: env.Topic, Payload: []byte("x")},
		{ID: "x", Topic: "", Payload: []byte("x")},
		{ID: "x", Topic: env.Topic, Payload: make([]byte, idem.MaxPayload+1)},
	} {
		if err := env.Sink.Publish(ctx, m); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("Publish(ID %q, Topic %q, %d bytes) = %v, want idem.ErrInvalid", m.ID, m.Topic, len(m.Payload), err)
		}
	}
}

func testBrokerCancelled(t *testing.T, env BrokerEnv) {
	src := env.NewSource(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	ds, err := src.Receive(ctx, 10) // nothing was published: it must return when ctx ends
	if len(ds) != 0 || err == nil {
		t.Fatalf("Receive on an empty topic with a cancelled ctx = %v, %v; want no deliveries and an error", ids(ds), err)
	}
}

// testBrokerClosed: max below 1 is an input error; a Receive blocked at Close and
// every Receive after it return idem.ErrClosed; a second Close is harmless.
func testBrokerClosed(t *testing.T, env BrokerEnv) {
	src := env.NewSource(t)
	if _, err := src.Receive(context.Background(), 0); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("Receive(max 0) = %v, want idem.ErrInvalid", err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := src.Receive(context.Background(), 1) // nothing was published: blocks until Close
		blocked <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it block; either order must give ErrClosed
	if err := src.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-blocked; !errors.Is(err, idem.ErrClosed) {
		t.Errorf("a Receive blocked at Close returned %v, want idem.ErrClosed", err)
	}
	if _, err := src.Receive(context.Background(), 1); !errors.Is(err, idem.ErrClosed) {
		t.Errorf("Receive after Close = %v, want idem.ErrClosed", err)
	}
	if err := src.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func ids(ds []idem.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func deliveriesOf(msgs []idem.Message) []idem.Delivery {
	out := make([]idem.Delivery, len(msgs))
	for i, m := range msgs {
		out[i] = idem.Delivery{Message: m}
	}
	return out
}

// HeldIsKept checks the promise of a source that renews its unsettled deliveries
// (JetStream's in-progress acks, Redis Streams' idle resets): a delivery handed
// out and not settled is not delivered again to a competing source of the group
// while its source lives, held past twice env.Redelivery, the broker's wait before
// it redelivers. Give env a Redelivery of a few seconds: the source renews every
// third of it, and a machine stalled for most of one would fail the check.
func HeldIsKept(t *testing.T, env BrokerEnv) {
	t.Helper()
	Publish(t, env.Sink, brokerMsg(env, 1))
	got := Receive(t, env.NewSource(t), 1, env.wait())
	if len(got) != 1 {
		t.Fatalf("received %d of 1", len(got))
	}
	rival := env.NewSource(t)
	for start := time.Now(); time.Since(start) < 2*env.Redelivery; {
		if again := Receive(t, rival, 1, env.Redelivery/4); len(again) != 0 {
			t.Fatalf("held unsettled for %v (the broker redelivers after %v), %s was delivered again to a competing source",
				time.Since(start).Round(time.Millisecond), env.Redelivery, again[0].ID)
		}
	}
	Ack(t, got...)
}
