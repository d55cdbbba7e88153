package idemnats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/nats-io/nats.go"
)

// TestDeliveryFields: what a consumer sees of a published message, without the
// transport's own headers.
func TestDeliveryFields(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	sink := newSink(t, js, idemnats.SinkConfig{})
	m := idem.Message{ID: "order-1", Topic: prefix + ".orders.created", Headers: map[string]string{"trace": "abc", "Content-Type": "application/json"}, Payload: []byte(`{}`)}
	publish(t, sink, m)
	src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "d", FilterSubjects: []string{prefix + ".orders.>"}})
	d := receiveN(t, src, 1)[0]
	if d.ID != m.ID || d.Topic != m.Topic || string(d.Payload) != "{}" || d.Attempt != 1 || d.Position != "stream seq 1" {
		t.Errorf("delivery = %+v, Attempt %d, Position %q; want the message, Attempt 1, stream seq 1", d.Message, d.Attempt, d.Position)
	}
	if len(d.Headers) != 2 || d.Headers["trace"] != "abc" || d.Headers["Content-Type"] != "application/json" {
		t.Errorf("headers = %v, want exactly trace and Content-Type (no Nats-Msg-Id)", d.Headers)
	}
	if err := d.Settler.Nak(context.Background(), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	again := receiveN(t, src, 1)[0]
	if again.ID != m.ID || again.Attempt != 2 {
		t.Errorf("after Nak: %s Attempt %d, want %s Attempt 2", again.ID, again.Attempt, m.ID)
	}
	ackAll(t, again)
	if err := again.Settler.Ack(context.Background()); err == nil || idem.IsRetryable(err) {
		t.Errorf("second Ack = %v, want a non-retryable error (already settled)", err)
	}
}

// TestForeignMessages: messages published by other tools are delivered, never
// dropped: without any id (the inbox dead-letters them) or with idem.HeaderID.
func TestForeignMessages(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	ctx := context.Background()
	if _, err := js.Publish(ctx, prefix+".raw", []byte("no id")); err != nil {
		t.Fatal(err)
	}
	withHeader := nats.NewMsg(prefix + ".raw")
	withHeader.Header.Set(idem.HeaderID, "from-kafka-bridge")
	withHeader.Header.Set("Nats-Expected-Stream", stream)
	if _, err := js.PublishMsg(ctx, withHeader); err != nil {
		t.Fatal(err)
	}
	src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "d"})
	got := receiveN(t, src, 2)
	if got[0].ID != "" || string(got[0].Payload) != "no id" {
		t.Errorf("message without id delivered as %+v, want ID \"\"", got[0].Message)
	}
	if got[1].ID != "from-kafka-bridge" || len(got[1].Headers) != 0 {
		t.Errorf("message with %s delivered as %+v, want its ID and no headers left", idem.HeaderID, got[1].Message)
	}
	ackAll(t, got...)
}

// TestClose: deliveries handed out before Close can still be acked (BrokerSuite
// checks what Receive does at and after Close).
func TestClose(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	sink := newSink(t, js, idemnats.SinkConfig{})
	publish(t, sink, idem.Message{ID: "a", Topic: prefix + ".x", Payload: []byte("a")})
	src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "d"})
	held := receiveN(t, src, 1)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	ackAll(t, held...)
}

// TestCompetingSources: two sources of one durable share the messages; together
// they see each exactly once when they ack.
func TestCompetingSources(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	publish(t, newSink(t, js, idemnats.SinkConfig{}), hundred(prefix)...)
	cfg := idemnats.SourceConfig{Stream: stream, Durable: "group", AckWait: time.Minute}
	a, b := openSource(t, js, cfg), openSource(t, js, cfg)
	seen := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; len(seen) < 100; i++ {
		src := a
		if i%2 == 1 {
			src = b
		}
		// A source's open pull request may hold the last messages for its next
		// Receive, so a Receive that finds nothing soon gives the other source a turn.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ds, err := src.Receive(ctx, 7)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Receive with %d seen: %v", len(seen), err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 100 messages seen within 60s", len(seen))
		}
		ackAll(t, ds...)
		for _, d := range ds {
			seen[d.ID]++
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times to the group, want once", id, n)
		}
	}
}

// TestDeadConnectionReceive: settling or receiving on a closed connection is a
// retryable backend error.
func TestDeadConnectionReceive(t *testing.T) {
	t.Parallel()
	nc, js := connect(t)
	stream, prefix := newStream(t, js)
	publish(t, newSink(t, js, idemnats.SinkConfig{}), hundred(prefix)[:2]...)
	src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "d", FetchWait: time.Second})
	ds := receiveN(t, src, 1)
	nc.Close()
	var be *idem.BackendError
	if err := ds[0].Settler.Ack(context.Background()); !errors.As(err, &be) || be.Op != "ack" {
		t.Errorf("Ack on a closed connection = %v, want *idem.BackendError{Op: ack}", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := src.Receive(ctx, 1) // may first hand out the prefetched second message
		if err == nil {
			continue
		}
		if !errors.As(err, &be) || be.Op != "receive" || !idem.IsRetryable(err) {
			t.Errorf("Receive on a closed connection = %v, want a retryable *idem.BackendError{Op: receive}", err)
		}
		break
	}
}

func TestSourceConfig(t *testing.T) {
	t.Parallel()
	_, js := embeddedJS(t)
	ok := idemnats.SourceConfig{Stream: "S", Durable: "d"}
	for name, tc := range map[string]struct {
		edit  func(*idemnats.SourceConfig)
		field string
	}{
		"no stream":          {func(c *idemnats.SourceConfig) { c.Stream = "" }, "SourceConfig.Stream"},
		"dot in stream":      {func(c *idemnats.SourceConfig) { c.Stream = "a.b" }, "SourceConfig.Stream"},
		"no durable":         {func(c *idemnats.SourceConfig) { c.Durable = "" }, "SourceConfig.Durable"},
		"space in durable":   {func(c *idemnats.SourceConfig) { c.Durable = "a b" }, "SourceConfig.Durable"},
		"empty filter":       {func(c *idemnats.SourceConfig) { c.FilterSubjects = []string{""} }, "SourceConfig.FilterSubjects[0]"},
		"negative ack wait":  {func(c *idemnats.SourceConfig) { c.AckWait = -time.Second }, "SourceConfig.AckWait"},
		"max ack pending -2": {func(c *idemnats.SourceConfig) { c.MaxAckPending = -2 }, "SourceConfig.MaxAckPending"},
		"tiny fetch wait":    {func(c *idemnats.SourceConfig) { c.FetchWait = time.Microsecond }, "SourceConfig.FetchWait"},
		"negative extension": {func(c *idemnats.SourceConfig) { c.MaxExtension = -time.Second }, "SourceConfig.MaxExtension"},
		"extension of days":  {func(c *idemnats.SourceConfig) { c.MaxExtension = 48 * time.Hour }, "SourceConfig.MaxExtension"},
	} {
		cfg := ok
		tc.edit(&cfg)
		_, err := idemnats.NewSource(context.Background(), js, cfg)
		if !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: NewSource = %v, want idem.ErrInvalid naming %s", name, err, tc.field)
		}
	}
	_, err := idemnats.NewSource(context.Background(), js, ok) // no such stream
	var be *idem.BackendError
	if !errors.As(err, &be) {
		t.Errorf("NewSource on a missing stream = %v, want *idem.BackendError", err)
	}
}

// TestCancelledReceiveKeepsMessages: a message that reaches the source after a
// Receive gave up (its ctx ended) is kept for the next Receive, not left to come
// back after AckWait.
func TestCancelledReceiveKeepsMessages(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "d", AckWait: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if ds, err := src.Receive(ctx, 5); !errors.Is(err, context.DeadlineExceeded) || len(ds) != 0 {
		t.Fatalf("Receive on an empty stream = %d deliveries, %v; want context.DeadlineExceeded", len(ds), err)
	}
	publish(t, newSink(t, js, idemnats.SinkConfig{}), hundred(prefix)[:3]...)
	got := receiveN(t, src, 3) // within 30 s, far below the 1 minute AckWait
	for _, d := range got {
		if d.Attempt != 1 {
			t.Errorf("%s has Attempt %d, want 1: it was lost to a cancelled fetch", d.ID, d.Attempt)
		}
	}
	ackAll(t, got...)
}

// TestCloseGivesBackPrefetched: messages fetched but not handed out when the
// source closes are Nak'ed, so the next source gets them without waiting AckWait.
func TestCloseGivesBackPrefetched(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	publish(t, newSink(t, js, idemnats.SinkConfig{}), hundred(prefix)[:5]...)
	cfg := idemnats.SourceConfig{Stream: stream, Durable: "d", AckWait: time.Minute}
	first := openSource(t, js, cfg)
	held := receiveN(t, first, 1) // the fetch asked for 1: nothing else is prefetched
	ds, err := first.Receive(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, ds...) // the fetch for 4 may have brought more than it returned
	ackAll(t, held...)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	rest := receiveN(t, openSource(t, js, cfg), 5-len(held)) // within 30 s, below AckWait
	ackAll(t, rest...)
}

// TestPrefetch: once a Receive has handed out the buffer, the source asks for the
// next batch without waiting for the next Receive (the broker shows those messages
// delivered, unacknowledged); Close gives them back at once. Without Prefetch, what
// the caller received is all the broker delivered.
func TestPrefetch(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	publish(t, newSink(t, js, idemnats.SinkConfig{}), hundred(prefix)[:20]...)
	ctx := context.Background()
	pending := func(durable string) int { return consumerInfo(t, js, stream, durable).NumAckPending }

	cfg := idemnats.SourceConfig{Stream: stream, Durable: "pre", AckWait: time.Minute, Prefetch: true}
	src := openSource(t, js, cfg)
	var got []idem.Delivery
	for len(got) < 5 { // always asking for 5: a prefetch asks for what the last Receive did
		ds, err := src.Receive(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if n := pending("pre"); n == 10 {
			break // 5 handed out, 5 prefetched
		} else if time.Now().After(deadline) {
			t.Fatalf("%d messages delivered after receiving 5 with batches of 5; want 10 (the next batch prefetched)", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ackAll(t, got...)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	next := receiveN(t, openSource(t, js, cfg), 15) // the 5 given back come first, well before AckWait
	ackAll(t, next...)

	off := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "off", AckWait: time.Minute})
	for n := 0; n < 5; {
		ds, err := off.Receive(ctx, 5-n)
		if err != nil {
			t.Fatal(err)
		}
		n += len(ds)
	}
	// The pull requests asked for exactly 5 in all; the last may still be on the
	// server until FetchWait, but it has nothing more to bring.
	if n := pending("off"); n != 5 {
		t.Errorf("without Prefetch: %d messages delivered after receiving 5, want 5", n)
	}

	// An idle source does not keep asking: a pull request that brought nothing is
	// not followed by another, so a message published later waits for a Receive.
	idleStream, idlePrefix := newStream(t, js)
	idle := openSource(t, js, idemnats.SourceConfig{Stream: idleStream, Durable: "idle", AckWait: time.Minute,
		FetchWait: 50 * time.Millisecond, Prefetch: true})
	rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, err := idle.Receive(rctx, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on an empty stream = %v, want its context's deadline", err)
	}
	cancel()
	for deadline := time.Now().Add(30 * time.Second); consumerInfo(t, js, idleStream, "idle").NumWaiting != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the empty pull request is still waiting after 30s (FetchWait 50ms)")
		}
	}
	publish(t, newSink(t, js, idemnats.SinkConfig{}), hundred(idlePrefix)[:1]...)
	time.Sleep(300 * time.Millisecond) // six FetchWaits: time for a chained request to take it
	if ci := consumerInfo(t, js, idleStream, "idle"); ci.NumAckPending != 0 || ci.NumWaiting != 0 {
		t.Errorf("idle source: %d delivered, %d pull requests waiting; want 0 and 0 until the next Receive", ci.NumAckPending, ci.NumWaiting)
	}
	ackAll(t, receiveN(t, idle, 1)...)
}

func TestReceiveMax(t *testing.T) {
	t.Parallel()
	_, js := embeddedJS(t)
	stream, _ := newStream(t, js)
	src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "d"})
	if _, err := src.Receive(context.Background(), 0); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("Receive(max 0) = %v, want idem.ErrInvalid", err)
	}
}

// TestMaxAckPendingOneKeepsOrder: with MaxAckPending 1, a Nak'ed message comes back
// before anything after it, so order holds across redeliveries.
func TestMaxAckPendingOneKeepsOrder(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	msgs := hundred(prefix)[:4]
	publish(t, newSink(t, js, idemnats.SinkConfig{}), msgs...)
	src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "d", MaxAckPending: 1, AckWait: time.Minute})
	var order []string
	for len(order) < len(msgs) {
		for _, d := range receiveN(t, src, 1) {
			if d.Attempt == 1 { // fail the first attempt of every message
				if err := d.Settler.Nak(context.Background(), 100*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				continue
			}
			ackAll(t, d)
			order = append(order, d.ID)
		}
	}
	for i, id := range order {
		if id != msgs[i].ID {
			t.Fatalf("acked in order %v, want publish order", order)
		}
	}
}
