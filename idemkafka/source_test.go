package idemkafka_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A consumer that stops without acknowledging anything (Close, as in a crash that
// still left the group) loses nothing: a new member receives every record.
func TestCloseWithoutAckRedelivers(t *testing.T) {
	t.Parallel()
	f := setup(t, 2)
	msgs := f.msgs(10, 4)
	f.publish(t, msgs...)
	first := f.source(t)
	receiveN(t, first, 10)
	first.Close()
	again := receive(t, f.source(t), 10, 30*time.Second)
	want := idsOf(deliveries(msgs))
	got := idsOf(again)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("after the crash, redelivered %v; want all of %v", got, want)
	}
}

// The committed offset of a partition is its first unacknowledged record: records
// acknowledged after a gap are redelivered with it, and nothing before it is.
func TestCommitStopsAtFirstUnacked(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	f.publish(t, f.msgs(10, 1)...)
	first := f.source(t)
	got := receiveN(t, first, 10)
	ack(t, got[0], got[1], got[2], got[5]) // 3 and 4 are not done
	if err := first.Commit(context.Background()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if off := f.committed(t)[0]; off != 3 {
		t.Fatalf("committed offset %d; want 3, the first unacknowledged record", off)
	}
	first.Close()
	if err := first.Commit(context.Background()); !errors.Is(err, idem.ErrClosed) {
		t.Errorf("Commit after Close = %v, want idem.ErrClosed", err)
	}

	second := f.source(t)
	again := receive(t, second, 7, 30*time.Second)
	if want := idsOf(got[3:]); !slices.Equal(idsOf(again), want) {
		t.Fatalf("redelivered %v; want %v (from the first unacknowledged record on)", idsOf(again), want)
	}
	ack(t, again...)
	if extra := receive(t, second, 1, time.Second); len(extra) != 0 {
		t.Fatalf("%s delivered again after everything was acknowledged", extra[0].ID)
	}
}

// A Nak'd record holds the partition's committed offset back until it is acked,
// even when later records are acknowledged and the source closes meanwhile.
func TestNakHoldsCommit(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	f.publish(t, f.msgs(3, 1)...)
	first := f.source(t)
	got := receiveN(t, first, 3)
	if err := got[0].Settler.Nak(context.Background(), time.Hour); err != nil {
		t.Fatalf("Nak: %v", err)
	}
	ack(t, got[1:]...)
	first.Close()
	again := receive(t, f.source(t), 3, 30*time.Second)
	if want := idsOf(got); !slices.Equal(idsOf(again), want) {
		t.Fatalf("after Nak of %s and Close, redelivered %v; want %v", got[0].ID, idsOf(again), want)
	}
}

// Settling follows the rules in the Settler docs: a second settle of a delivery
// (Ack twice, Nak after Ack, Nak twice) is idem.ErrSettled and does nothing, and
// after Close every settle is ErrRevoked.
func TestSettleRules(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	f.publish(t, f.msgs(3, 1)...)
	src := f.source(t)
	got := receiveN(t, src, 3)
	ctx := context.Background()
	ack(t, got[0])
	if err := got[0].Settler.Ack(ctx); !errors.Is(err, idem.ErrSettled) {
		t.Errorf("second Ack = %v, want idem.ErrSettled", err)
	}
	if err := got[0].Settler.Nak(ctx, 0); !errors.Is(err, idemkafka.ErrAcked) {
		t.Errorf("Nak after Ack = %v, want ErrAcked", err)
	}

	if err := got[1].Settler.Nak(ctx, 0); err != nil {
		t.Fatalf("Nak: %v", err)
	}
	if err := got[1].Settler.Nak(ctx, 0); !errors.Is(err, idem.ErrSettled) {
		t.Errorf("second Nak of a waiting record = %v, want idem.ErrSettled", err)
	}
	again := receive(t, src, 1, 30*time.Second)
	if len(again) != 1 || again[0].ID != got[1].ID {
		t.Fatalf("after Nak, received %v; want %s", idsOf(again), got[1].ID)
	}
	if err := got[1].Settler.Nak(ctx, 0); !errors.Is(err, idem.ErrSettled) {
		t.Errorf("Nak of the earlier delivery = %v, want idem.ErrSettled (stale, ignored)", err)
	}
	if extra := receive(t, src, 1, 500*time.Millisecond); len(extra) != 0 {
		t.Fatalf("a stale Nak redelivered %s", extra[0].ID)
	}
	ack(t, again...)

	src.Close()
	if err := got[2].Settler.Ack(ctx); !errors.Is(err, idemkafka.ErrRevoked) {
		t.Errorf("Ack after Close = %v, want ErrRevoked", err)
	}
	if err := got[2].Settler.Nak(ctx, 0); !errors.Is(err, idemkafka.ErrRevoked) {
		t.Errorf("Nak after Close = %v, want ErrRevoked", err)
	}
	if idem.IsRetryable(idemkafka.ErrRevoked) {
		t.Error("ErrRevoked is retryable; it must be final")
	}
}

// Deliveries carry the message as published: ID from the header (which is not
// among the headers), the key as OrderingKey, the position and Offset; a record
// without an ID (produced by a foreign producer) is delivered with ID "".
func TestDeliveryFields(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	m := idem.Message{ID: "order-17", Topic: f.topic, OrderingKey: "customer-3",
		Headers: map[string]string{"trace": "abc", idem.HeaderID: "ignored"}, Payload: []byte(`{"total":12}`)}
	f.publish(t, m)
	raw, err := kgo.NewClient(kgo.SeedBrokers(f.c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.ProduceSync(context.Background(), &kgo.Record{Topic: f.topic, Value: []byte("foreign")}).FirstErr(); err != nil {
		t.Fatalf("raw produce: %v", err)
	}

	got := receiveN(t, f.source(t), 2)
	d := got[0]
	if d.ID != m.ID || d.Topic != f.topic || d.OrderingKey != m.OrderingKey || string(d.Payload) != string(m.Payload) {
		t.Errorf("delivered %+v; want %+v", d.Message, m)
	}
	if len(d.Headers) != 1 || d.Headers["trace"] != "abc" {
		t.Errorf("headers %v; want only trace=abc (the ID header is not a header)", d.Headers)
	}
	if d.Attempt != 0 || d.Position != "partition 0 offset 0" {
		t.Errorf("Attempt %d, Position %q; want 0 and \"partition 0 offset 0\"", d.Attempt, d.Position)
	}
	if topic, p, off, ok := idemkafka.Offset(d); !ok || topic != f.topic || p != 0 || off != 0 {
		t.Errorf("Offset = %s %d %d %v; want %s 0 0 true", topic, p, off, ok, f.topic)
	}
	if got[1].ID != "" || string(got[1].Payload) != "foreign" {
		t.Errorf("record without an ID delivered as %+v; want ID \"\" and its payload", got[1].Message)
	}
	if _, _, _, ok := idemkafka.Offset(idem.Delivery{}); ok {
		t.Error("Offset of a foreign delivery is ok")
	}
	ack(t, got...)
}

// In the offsets-in-the-database mode, consumption resumes from the offsets stored
// with the effects, not from the group's commits: effects applied but never
// acknowledged are not delivered again.
func TestStoredOffsets(t *testing.T) {
	t.Parallel()
	f := setup(t, 2)
	f.publish(t, f.msgs(20, 4)...)
	db := &offsetDB{next: make(map[string]map[int32]int64)}
	cfg := func() idemkafka.SourceConfig {
		return idemkafka.SourceConfig{Brokers: f.c.ListenAddrs(), Group: f.group, Topics: []string{f.topic},
			StoredOffsets: db.load, Options: fastGroup()}
	}
	first := newSourceConfig(t, cfg())
	got := receiveN(t, first, 20)
	applied := make(map[string]bool)
	perPartition := make(map[int32]int)
	for _, d := range got { // apply the first 3 of each partition, acknowledging none
		_, p, _, _ := idemkafka.Offset(d)
		if perPartition[p] < 3 {
			perPartition[p]++
			db.apply(d)
			applied[d.ID] = true
		}
	}
	first.Close() // commits nothing: nothing was acknowledged

	second := newSourceConfig(t, cfg())
	again := receive(t, second, 20-len(applied), 30*time.Second)
	for _, d := range again {
		if applied[d.ID] {
			t.Errorf("%s delivered again though its effect (and offset) was stored", d.ID)
		}
	}
	if len(again) != 20-len(applied) {
		t.Fatalf("received %d; want the %d records not applied", len(again), 20-len(applied))
	}
	ack(t, again...)
}

// offsetDB stands for the database in which the inbox stores offsets with effects.
type offsetDB struct {
	mu   sync.Mutex
	next map[string]map[int32]int64
}

func (db *offsetDB) apply(d idem.Delivery) {
	topic, p, off, _ := idemkafka.Offset(d)
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.next[topic] == nil {
		db.next[topic] = make(map[int32]int64)
	}
	db.next[topic][p] = max(db.next[topic][p], off+1)
}

func (db *offsetDB) load(_ context.Context, assigned map[string][]int32) (map[string]map[int32]int64, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make(map[string]map[int32]int64)
	for topic, ps := range assigned {
		for _, p := range ps {
			if off, ok := db.next[topic][p]; ok {
				if out[topic] == nil {
					out[topic] = make(map[int32]int64)
				}
				out[topic][p] = off
			}
		}
	}
	return out, nil
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	brokers := []string{"127.0.0.1:1"}
	for _, tc := range []struct {
		field string
		cfg   idemkafka.SourceConfig
	}{
		{"SourceConfig.Brokers", idemkafka.SourceConfig{Group: "g", Topics: []string{"t"}}},
		{"SourceConfig.Group", idemkafka.SourceConfig{Brokers: brokers, Topics: []string{"t"}}},
		{"SourceConfig.Topics", idemkafka.SourceConfig{Brokers: brokers, Group: "g"}},
		{"SourceConfig.Topics", idemkafka.SourceConfig{Brokers: brokers, Group: "g", Topics: []string{""}}},
		{"SourceConfig.CommitInterval", idemkafka.SourceConfig{Brokers: brokers, Group: "g", Topics: []string{"t"}, CommitInterval: -time.Second}},
	} {
		_, err := idemkafka.NewSource(tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("NewSource(%+v) = %v; want an InputError on %s", tc.cfg, err, tc.field)
		}
	}
	for _, tc := range []struct {
		name string
		cfg  idemkafka.SinkConfig
	}{
		{"no brokers", idemkafka.SinkConfig{}},
		{"idempotence off", idemkafka.SinkConfig{Brokers: brokers, Options: []kgo.Opt{kgo.DisableIdempotentWrite()}}},
		{"leader ack", idemkafka.SinkConfig{Brokers: brokers, Options: []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck())}}},
	} {
		if _, err := idemkafka.NewSink(tc.cfg); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("NewSink(%s) = %v; want idem.ErrInvalid", tc.name, err)
		}
	}
}

func deliveries(msgs []idem.Message) []idem.Delivery {
	out := make([]idem.Delivery, len(msgs))
	for i, m := range msgs {
		out[i] = idem.Delivery{Message: m}
	}
	return out
}

// A member that dies without leaving the group (a static member, which does not
// send LeaveGroup on Close, stands for a crashed process) keeps its partitions
// until its session times out; then they go to the other member, which receives
// every record the dead one had not acknowledged.
func TestCrashWithoutLeaving(t *testing.T) {
	t.Parallel()
	topic := testsvc.UniqueName("idemkafka-")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := fixture{c: c, topic: topic, group: testsvc.UniqueName("group-"), sink: newSink(t, c)}
	f.publish(t, f.msgs(10, 1)...)

	crashed := f.source(t, kgo.InstanceID("crashes"), kgo.SessionTimeout(time.Second))
	got := receiveN(t, crashed, 10)
	ack(t, got[:4]...)
	crashed.Close() // commits the 4 acknowledged, but stays in the group
	again := receive(t, f.source(t), 6, 30*time.Second)
	if want := idsOf(got[4:]); !slices.Equal(idsOf(again), want) {
		t.Fatalf("after the session timeout, received %v; want %v", idsOf(again), want)
	}
}
