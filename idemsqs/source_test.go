package idemsqs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqs"
	"github.com/idemhq/idem/idemtest"
)

// TestVisibilityExtended: while a delivery is unsettled its source keeps it
// invisible well past the visibility timeout, so a competing consumer does not get
// it; once the first consumer Naks it, the second gets it, as a redelivery.
func TestVisibilityExtended(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, idemsqs.QueueConfig{})
	idemtest.Publish(t, f.sink, idem.Message{ID: "slow-1", Topic: f.queue, Payload: []byte("x")})
	first := f.source(t, idemsqs.SourceConfig{VisibilityTimeout: time.Second})
	got := idemtest.ReceiveN(t, first, 1)
	second := f.source(t, idemsqs.SourceConfig{VisibilityTimeout: time.Second})
	if stolen := idemtest.Receive(t, second, 1, 4*time.Second); len(stolen) != 0 {
		t.Fatalf("4 visibility timeouts later, a competing consumer received %s held by a running handler", stolen[0].ID)
	}
	if err := got[0].Settler.Nak(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	again := idemtest.ReceiveN(t, second, 1)
	// At least 2: a long poll the client gave up on may have received it once more
	// (as on SQS, where it then waits out its visibility timeout).
	if again[0].ID != "slow-1" || again[0].Attempt < 2 {
		t.Fatalf("after Nak: %s attempt %d, want slow-1 attempt 2 or more", again[0].ID, again[0].Attempt)
	}
	idemtest.Ack(t, again...)
	if err := got[0].Settler.Ack(context.Background()); err == nil || errors.Is(err, idem.ErrInvalid) == false {
		t.Fatalf("a second settlement of one delivery = %v, want an input error", err)
	}
}

// TestMaxExtension: a handler that never settles holds its message only for
// MaxExtension; then the message comes back to another consumer. The stuck
// consumer's late Ack uses a receipt handle SQS no longer honours: it succeeds and
// deletes nothing, and the second consumer's Ack deletes the message.
func TestMaxExtension(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, idemsqs.QueueConfig{})
	idemtest.Publish(t, f.sink, idem.Message{ID: "stuck-1", Topic: f.queue, Payload: []byte("x")})
	stuck := f.source(t, idemsqs.SourceConfig{VisibilityTimeout: time.Second, MaxExtension: 2 * time.Second})
	held := idemtest.ReceiveN(t, stuck, 1)
	other := f.source(t, idemsqs.SourceConfig{VisibilityTimeout: 5 * time.Second})
	back := idemtest.ReceiveN(t, other, 1)
	if back[0].ID != "stuck-1" || back[0].Attempt != 2 {
		t.Fatalf("got %s attempt %d, want stuck-1 attempt 2", back[0].ID, back[0].Attempt)
	}
	idemtest.Ack(t, held...) // stale: SQS answers success and keeps the message
	if settledQueue(t, f.c, f.url) {
		t.Fatal("a stale receipt handle deleted the message another consumer holds")
	}
	idemtest.Ack(t, back...)
	if !settledQueue(t, f.c, f.url) {
		t.Fatal("the current holder's Ack did not delete the message")
	}
}

// A source whose renewals are paused (a process stopped past its visibility
// timeout) loses its delivery to another consumer after one timeout, long before
// MaxExtension; its late Ack deletes nothing.
func TestPausedRenewalsLoseTheDelivery(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, idemsqs.QueueConfig{})
	idemtest.Publish(t, f.sink, idem.Message{ID: "paused-1", Topic: f.queue, Payload: []byte("x")})
	paused := f.source(t, idemsqs.SourceConfig{VisibilityTimeout: time.Second})
	resume := paused.PauseRenewals()
	defer resume()
	held := idemtest.ReceiveN(t, paused, 1)
	other := f.source(t, idemsqs.SourceConfig{VisibilityTimeout: 5 * time.Second})
	back := idemtest.ReceiveN(t, other, 1)
	if back[0].ID != "paused-1" || back[0].Attempt != 2 {
		t.Fatalf("got %s attempt %d, want paused-1 attempt 2", back[0].ID, back[0].Attempt)
	}
	resume()
	idemtest.Ack(t, held...)
	if settledQueue(t, f.c, f.url) {
		t.Fatal("the paused consumer's stale Ack deleted the message another consumer holds")
	}
	idemtest.Ack(t, back...)
}

// TestCloseReleases: Close hands unsettled deliveries back at once (a new consumer
// gets them without waiting out the visibility timeout); deliveries received before
// Close can still be acknowledged after it.
func TestCloseReleases(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, idemsqs.QueueConfig{})
	idemtest.Publish(t, f.sink, idem.Message{ID: "a", Topic: f.queue, OrderingKey: "a", Payload: []byte("x")},
		idem.Message{ID: "b", Topic: f.queue, OrderingKey: "b", Payload: []byte("x")})
	src := f.source(t, idemsqs.SourceConfig{VisibilityTimeout: 600 * time.Second})
	got := idemtest.ReceiveN(t, src, 2)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	idemtest.Ack(t, got[0])
	again := idemtest.ReceiveN(t, f.source(t, idemsqs.SourceConfig{}), 1)
	if again[0].ID != got[1].ID {
		t.Fatalf("after Close, got %s, want the unsettled %s", again[0].ID, got[1].ID)
	}
	idemtest.Ack(t, again...)
	if !settledQueue(t, f.c, f.url) {
		t.Fatal("the queue still holds messages")
	}
}

// TestConfigValidation: every bad field is an *idem.InputError naming it.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, idemsqs.QueueConfig{})
	ctx := context.Background()
	for _, tc := range []struct {
		field string
		cfg   idemsqs.SourceConfig
	}{
		{"SourceConfig.Queue", idemsqs.SourceConfig{}},
		{"SourceConfig.VisibilityTimeout", idemsqs.SourceConfig{Queue: f.queue, VisibilityTimeout: 1500 * time.Millisecond}},
		{"SourceConfig.VisibilityTimeout", idemsqs.SourceConfig{Queue: f.queue, VisibilityTimeout: 13 * time.Hour}},
		{"SourceConfig.MaxExtension", idemsqs.SourceConfig{Queue: f.queue, MaxExtension: -time.Second}},
		{"SourceConfig.WaitTime", idemsqs.SourceConfig{Queue: f.queue, WaitTime: time.Minute}},
	} {
		_, err := idemsqs.NewSource(ctx, f.c, tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("NewSource(%+v) = %v, want an input error on %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := idemsqs.NewSource(ctx, f.c, idemsqs.SourceConfig{Queue: "missing.fifo"}); !idem.IsRetryable(err) {
		t.Errorf("NewSource on a missing queue = %v, want a backend error", err)
	}
	for _, tc := range []struct {
		field string
		cfg   idemsqs.SinkConfig
	}{
		{"SinkConfig.DefaultGroup", idemsqs.SinkConfig{DefaultGroup: "with space"}},
		{"SinkConfig.MaxMessageSize", idemsqs.SinkConfig{MaxMessageSize: 2 << 20}},
	} {
		_, err := idemsqs.NewSink(f.c, tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("NewSink(%+v) = %v, want an input error on %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := idemsqs.EnsureQueue(ctx, f.c, "standard", idemsqs.QueueConfig{}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("EnsureQueue(standard) = %v, want an input error", err)
	}
}

// TestShortDeadline: a Receive whose ctx leaves less than a second still gets what
// is there (a short poll), and returns at its deadline when nothing is.
func TestShortDeadline(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, idemsqs.QueueConfig{})
	src := f.source(t, idemsqs.SourceConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if ds, err := src.Receive(ctx, 1); len(ds) != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on an empty queue = %v, %v; want the deadline", ds, err)
	}
	idemtest.Publish(t, f.sink, idem.Message{ID: "quick", Topic: f.queue, Payload: []byte("x")})
	ctx, cancel = context.WithTimeout(context.Background(), 900*time.Millisecond)
	defer cancel()
	ds, err := src.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].ID != "quick" {
		t.Fatalf("Receive with under a second = %v, %v; want quick (a short poll)", ds, err)
	}
	idemtest.Ack(t, ds...)
}
