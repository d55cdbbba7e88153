package idemkafka_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The largest payload idem accepts goes through: the producer's batch limit is
// raised to fit it (the broker's message.max.bytes must allow it too).
func TestLargestPayload(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	payload := bytes.Repeat([]byte("x"), idem.MaxPayload)
	f.publish(t, idem.Message{ID: "big", Topic: f.topic, Payload: payload})
	got := receive(t, f.source(t), 1, 30*time.Second)
	if len(got) != 1 || !bytes.Equal(got[0].Payload, payload) {
		t.Fatalf("received %d deliveries; want the %d-byte payload intact", len(got), len(payload))
	}
	ack(t, got...)
}

// Publish with an ended context fails as a BackendError wrapping the context's
// error, which IsRetryable does not call retryable.
func TestPublishCancelled(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := f.sink.Publish(ctx, f.msgs(1, 1)...)
	var be *idem.BackendError
	if !errors.As(err, &be) || be.Op != "publish" || !errors.Is(err, context.Canceled) || idem.IsRetryable(err) {
		t.Fatalf("Publish with a cancelled ctx = %v; want a BackendError(publish) wrapping context.Canceled", err)
	}
}

// A batch Kafka writes in part (one record's topic does not exist) fails with an
// *idem.PublishError saying which records were written, so the outbox relay sends
// only the others again; the written ones are there to consume.
func TestPublishPartlyAccepted(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	sink, err := idemkafka.NewSink(idemkafka.SinkConfig{Brokers: f.c.ListenAddrs(), Options: []kgo.Opt{kgo.UnknownTopicRetries(0)}})
	sink = idemtest.Opened(t, sink, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = sink.Publish(ctx,
		idem.Message{ID: "a", Topic: f.topic, Payload: []byte("1")},
		idem.Message{ID: "b", Topic: testsvc.UniqueName("nowhere-"), Payload: []byte("2")},
		idem.Message{ID: "c", Topic: f.topic, Payload: []byte("3")})
	var pe *idem.PublishError
	if !errors.As(err, &pe) || !slices.Equal(pe.Accepted, []bool{true, false, true}) {
		t.Fatalf("Publish = %v (%T), want an *idem.PublishError accepting a and c", err, err)
	}
	var be *idem.BackendError
	if !errors.As(err, &be) || be.Op != "publish" {
		t.Fatalf("Publish = %v, want the BackendError inside", err)
	}
	got := receive(t, f.source(t), 2, 30*time.Second)
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "c" {
		t.Fatalf("consumed %d records, want a and c", len(got))
	}
	ack(t, got...)
}

// Ping reaches a broker that answers, and fails on a closed port: the producer
// itself connects only when a record is produced.
func TestSinkPing(t *testing.T) {
	t.Parallel()
	f := setup(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.sink.Ping(ctx); err != nil {
		t.Fatalf("Ping of a running cluster: %v", err)
	}
	closed, err := idemkafka.NewSink(idemkafka.SinkConfig{Brokers: []string{testsvc.ClosedAddr(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	var be *idem.BackendError
	if err := closed.Ping(ctx); !errors.As(err, &be) || be.Op != "ping" {
		t.Fatalf("Ping of a closed port = %v, want a BackendError of op ping", err)
	}
}
