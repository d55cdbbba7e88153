package idemredis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsvc"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemtest"
	"github.com/redis/go-redis/v9"
)

// streamMinIdle is short so that redeliveries come quickly in tests.
const streamMinIdle = time.Second

// streamBundle is one test's stream: its key, a sink, and the client beneath.
type streamBundle struct {
	bundle
	stream string
	sink   *idemredis.StreamSink
}

func streamSetup(t *testing.T) streamBundle {
	t.Helper()
	b := setup(t, idemredis.Config{})
	sink, err := idemredis.NewStreamSink(b.client, idemredis.StreamSinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return streamBundle{bundle: b, stream: b.prefix + "stream", sink: sink}
}

// source opens a source on the bundle's stream in group "g", with the test MinIdle
// unless cfg says otherwise, closed when t ends.
func (b streamBundle) source(t *testing.T, cfg idemredis.StreamSourceConfig) *idemredis.StreamSource {
	t.Helper()
	cfg.Stream = b.stream
	if cfg.Group == "" {
		cfg.Group = "g"
	}
	if cfg.MinIdle == 0 {
		cfg.MinIdle = streamMinIdle
	}
	src, err := idemredis.NewStreamSource(b.client, cfg)
	return idemtest.Opened(t, src, err)
}

// The idemtest helpers under the names these tests use.
var (
	streamPublish = idemtest.Publish
	streamReceive = idemtest.ReceiveN
	streamAck     = idemtest.Ack
)

// streamEnv is a fresh stream as idemtest sees a broker.
func streamEnv(t *testing.T) idemtest.BrokerEnv {
	b := streamSetup(t)
	return idemtest.BrokerEnv{
		Topic:      b.stream,
		Sink:       b.sink,
		NewSource:  func(t *testing.T) idem.Source { return b.source(t, idemredis.StreamSourceConfig{}) },
		Features:   b.sink.Features(),
		Redelivery: streamMinIdle,
	}
}

func TestStreamBrokerSuite(t *testing.T) {
	t.Parallel()
	idemtest.BrokerSuite(t, streamEnv)
}

func (b streamBundle) pendingCount(t *testing.T) int64 {
	t.Helper()
	p, err := b.client.XPending(ctxFor(t), b.stream, "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}

// The entry layout is the contract with producers and consumers in other languages.
func TestStreamEntryLayout(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	err := b.sink.Publish(ctx,
		idem.Message{ID: "order-17", Topic: b.stream, Payload: []byte{0, 1, 0xff},
			Headers: map[string]string{"tenant": "a", idem.HeaderID: "ignored"}},
		idem.Message{ID: "order-18", Topic: b.stream})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := b.client.XRange(ctx, b.stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"id": "order-17", "payload": "\x00\x01\xff", "headers": `{"tenant":"a"}`},
		{"id": "order-18", "payload": ""},
	}
	if len(entries) != len(want) {
		t.Fatalf("stream holds %d entries, want %d", len(entries), len(want))
	}
	for i, e := range entries {
		if fmt.Sprint(e.Values) != fmt.Sprint(want[i]) {
			t.Errorf("entry %d = %v, want %v", i, e.Values, want[i])
		}
	}
	got := streamReceive(t, b.source(t, idemredis.StreamSourceConfig{}), 2)
	d := got[0]
	if d.ID != "order-17" || d.Topic != b.stream || !bytes.Equal(d.Payload, []byte{0, 1, 0xff}) ||
		len(d.Headers) != 1 || d.Headers["tenant"] != "a" || d.Position != entries[0].ID || d.Attempt != 1 {
		t.Errorf("delivery = %+v (attempt %d, position %s)", d.Message, d.Attempt, d.Position)
	}
	streamAck(t, got...)
}

// A consumer that dies with entries pending: another consumer of the group takes
// them over with XAUTOCLAIM once they have been idle for MinIdle.
func TestStreamDeadConsumerReclaimed(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	for i := range 3 {
		streamPublish(t, b.sink, idem.Message{ID: fmt.Sprint("m", i), Topic: b.stream})
	}
	dead := b.source(t, idemredis.StreamSourceConfig{Consumer: "dead"})
	first := streamReceive(t, dead, 3) // and it crashes: no ack, no Close,
	dead.PauseRenewals()               // and no more resets of their idle time

	alive := b.source(t, idemredis.StreamSourceConfig{Consumer: "alive"})
	again := streamReceive(t, alive, 3)
	for i, d := range again {
		if d.Position != first[i].Position || d.ID != first[i].ID {
			t.Errorf("reclaimed %s (%s), want %s (%s)", d.ID, d.Position, first[i].ID, first[i].Position)
		}
		if d.Attempt != 2 {
			t.Errorf("reclaimed %s has Attempt %d, want 2", d.ID, d.Attempt)
		}
	}
	owners, err := b.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: b.stream, Group: "g", Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range owners {
		if p.Consumer != "alive" {
			t.Errorf("entry %s is pending with %q, want alive", p.ID, p.Consumer)
		}
	}
	streamAck(t, again...)
	if n := b.pendingCount(t); n != 0 {
		t.Errorf("%d entries still pending after the acks", n)
	}
}

// Entries written by other producers are delivered with what they have; the inbox
// dead-letters those without an id.
func TestStreamMalformedEntries(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	var logs testsvc.Buffer
	tests := []struct {
		values  []any
		id      string
		payload string
		headers map[string]string
	}{
		{values: []any{"payload", "no id"}, payload: "no id"},
		{values: []any{"id", "only-id"}, id: "only-id"},
		{values: []any{"id", "bad-headers", "payload", "p", "headers", "not json"}, id: "bad-headers", payload: "p"},
		{values: []any{"payload", "p", "headers", `{"Idem-Msg-Id":"from-header","a":"b"}`}, id: "from-header", payload: "p", headers: map[string]string{"a": "b"}},
		{values: []any{"something", "else"}},
	}
	for _, tt := range tests {
		if err := b.client.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: tt.values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	src := b.source(t, idemredis.StreamSourceConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	got := streamReceive(t, src, len(tests))
	for i, d := range got {
		tt := tests[i]
		if d.ID != tt.id || string(d.Payload) != tt.payload || fmt.Sprint(d.Headers) != fmt.Sprint(tt.headers) || d.Topic != b.stream {
			t.Errorf("entry %v delivered as ID %q payload %q headers %v topic %q; want %q %q %v",
				tt.values, d.ID, d.Payload, d.Headers, d.Topic, tt.id, tt.payload, tt.headers)
		}
	}
	if !strings.Contains(logs.String(), "bad-headers") {
		t.Errorf("the malformed headers were not logged: %q", logs.String())
	}
	streamAck(t, got...)
}

// An entry deleted while pending cannot be delivered; reclaiming skips it, drops it
// from the pending list, logs it, and goes on with the others.
func TestStreamDeletedWhilePending(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	streamPublish(t, b.sink, idem.Message{ID: "gone", Topic: b.stream}, idem.Message{ID: "kept", Topic: b.stream})
	if err := b.client.XGroupCreate(ctx, b.stream, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	read, err := b.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{b.stream, ">"}, Block: -1}).Result()
	if err != nil || len(read) != 1 || len(read[0].Messages) != 2 {
		t.Fatalf("raw read = %v, %v", read, err)
	}
	gone := read[0].Messages[0].ID
	if err := b.client.XDel(ctx, b.stream, gone).Err(); err != nil {
		t.Fatal(err)
	}
	var logs testsvc.Buffer
	src := b.source(t, idemredis.StreamSourceConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	got := streamReceive(t, src, 1)
	if got[0].ID != "kept" {
		t.Fatalf("reclaimed %q, want kept", got[0].ID)
	}
	streamAck(t, got...)
	if n := b.pendingCount(t); n != 0 {
		t.Errorf("%d entries still pending; the deleted one should have left the pending list", n)
	}
	if !strings.Contains(logs.String(), gone) {
		t.Errorf("the deleted entry %s was not logged: %q", gone, logs.String())
	}
}

// A Nak longer than MinIdle is held by the source: a message nak'ed for longer comes
// back after one nak'ed for MinIdle, though Redis alone would reclaim both after
// MinIdle (in entry order, the long one first). The idle resets are not deliveries.
func TestStreamNakLongerThanMinIdle(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	streamPublish(t, b.sink, idem.Message{ID: "long", Topic: b.stream}, idem.Message{ID: "short", Topic: b.stream})
	src := b.source(t, idemredis.StreamSourceConfig{})
	got := streamReceive(t, src, 2)
	if err := got[0].Settler.Nak(ctx, 5*streamMinIdle); err != nil {
		t.Fatal(err)
	}
	if err := got[1].Settler.Nak(ctx, streamMinIdle); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 2 {
		d := streamReceive(t, src, 1)[0]
		if d.Attempt != 2 {
			t.Errorf("%s came back with Attempt %d, want 2", d.ID, d.Attempt)
		}
		order = append(order, d.ID)
		streamAck(t, d)
	}
	if !slices.Equal(order, []string{"short", "long"}) {
		t.Errorf("naked messages came back in the order %v, want [short long]", order)
	}
}

// A stream deleted under a running source (and its group with it) is recreated, and
// what is published afterwards is delivered.
func TestStreamRecreatedGroup(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	src := b.source(t, idemredis.StreamSourceConfig{})
	streamPublish(t, b.sink, idem.Message{ID: "before", Topic: b.stream})
	streamAck(t, streamReceive(t, src, 1)...)
	if err := b.client.Del(ctx, b.stream).Err(); err != nil {
		t.Fatal(err)
	}
	streamPublish(t, b.sink, idem.Message{ID: "after", Topic: b.stream})
	got := streamReceive(t, src, 1)
	if got[0].ID != "after" {
		t.Fatalf("after the stream was recreated, received %q", got[0].ID)
	}
	streamAck(t, got...)
}

// Close ends Receive and removes the consumer if it holds no pending entries.
func TestStreamClose(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	streamPublish(t, b.sink, idem.Message{ID: "m", Topic: b.stream})
	long := idemredis.StreamSourceConfig{MinIdle: time.Hour} // nothing is reclaimed here
	idle := b.source(t, long)
	holder := b.source(t, long)
	_ = streamReceive(t, holder, 1) // holds the entry, unacked
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := idle.Receive(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on an empty group = %v, want DeadlineExceeded", err)
	}
	for _, src := range []*idemredis.StreamSource{idle, holder, idle} {
		if err := src.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if _, err := src.Receive(ctx, 1); !errors.Is(err, idem.ErrClosed) {
			t.Fatalf("Receive after Close = %v, want idem.ErrClosed", err)
		}
	}
	consumers, err := b.client.XInfoConsumers(ctx, b.stream, "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(consumers) != 1 || consumers[0].Name != holder.Consumer() || consumers[0].Pending != 1 {
		t.Errorf("consumers after Close = %+v; want only %s, with its pending entry", consumers, holder.Consumer())
	}
}

func TestStreamMaxLen(t *testing.T) {
	t.Parallel()
	b := streamSetup(t)
	ctx := ctxFor(t)
	sink, err := idemredis.NewStreamSink(b.client, idemredis.StreamSinkConfig{MaxLen: 10})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]idem.Message, 1000)
	for i := range msgs {
		msgs[i] = idem.Message{ID: fmt.Sprint("m", i), Topic: b.stream}
	}
	streamPublish(t, sink, msgs...)
	if n := b.client.XLen(ctx, b.stream).Val(); n < 10 || n >= 1000 {
		t.Errorf("XLEN = %d after 1000 entries with MaxLen ~10", n)
	}
}
