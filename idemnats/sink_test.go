package idemnats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/nats-io/nats.go"
)

func hundred(prefix string) []idem.Message {
	msgs := make([]idem.Message, 100)
	for i := range msgs {
		msgs[i] = idem.Message{ID: fmt.Sprintf("order-%03d", i), Topic: prefix + ".orders", Payload: []byte(fmt.Sprint(i))}
	}
	return msgs
}

// TestDedup: an outbox relay that republishes a whole batch after a crash leaves
// the stream with one copy of each message (Nats-Msg-Id within Duplicates).
func TestDedup(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	for _, inFlight := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("MaxInFlight=%d", inFlight), func(t *testing.T) {
			t.Parallel()
			stream, prefix := newStream(t, js)
			sink := newSink(t, js, idemnats.SinkConfig{MaxInFlight: inFlight})
			for range 2 {
				publish(t, sink, hundred(prefix)...)
			}
			if n := streamMsgs(t, js, stream); n != 100 {
				t.Fatalf("stream holds %d messages after publishing 100 twice, want 100", n)
			}
			src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "d"})
			got := receiveN(t, src, 100)
			for i, d := range got {
				if want := fmt.Sprintf("order-%03d", i); d.ID != want {
					t.Fatalf("delivery %d is %s, want %s (publish order)", i, d.ID, want)
				}
			}
			ackAll(t, got...)
		})
	}
}

// TestDeadConnection: publishing on a closed connection is a backend failure the
// caller may retry, not a silent drop or a panic.
func TestDeadConnection(t *testing.T) {
	t.Parallel()
	nc, js := connect(t)
	_, prefix := newStream(t, js)
	sink := newSink(t, js, idemnats.SinkConfig{})
	nc.Close()
	msgs := hundred(prefix)
	for _, batch := range [][]idem.Message{msgs[:1], msgs} {
		err := sink.Publish(context.Background(), batch...)
		var be *idem.BackendError
		if !errors.As(err, &be) || be.Backend != "nats" || be.Op != "publish" {
			t.Fatalf("Publish of %d on a closed connection = %v, want *idem.BackendError{nats, publish}", len(batch), err)
		}
		if !idem.IsRetryable(err) || !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("Publish error %v: want retryable and wrapping nats.ErrConnectionClosed", err)
		}
	}
}

// TestBadInputPublishesNothing: one bad message refuses the whole batch before
// anything reaches the stream.
func TestBadInputPublishesNothing(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	stream, prefix := newStream(t, js)
	sink := newSink(t, js, idemnats.SinkConfig{})
	good := idem.Message{ID: "ok", Topic: prefix + ".a", Payload: []byte("x")}
	bad := map[string]idem.Message{
		"wildcard topic":       {ID: "b", Topic: prefix + ".*", Payload: []byte("x")},
		"empty token":          {ID: "b", Topic: prefix + "..a", Payload: []byte("x")},
		"space in topic":       {ID: "b", Topic: prefix + ".a b", Payload: []byte("x")},
		"Nats- header":         {ID: "b", Topic: prefix + ".a", Headers: map[string]string{"Nats-Rollup": "all"}, Payload: []byte("x")},
		"Idem-Msg-Id header":   {ID: "b", Topic: prefix + ".a", Headers: map[string]string{idem.HeaderID: "other"}, Payload: []byte("x")},
		"line break in value":  {ID: "b", Topic: prefix + ".a", Headers: map[string]string{"X": "a\r\nNats-Rollup: all"}, Payload: []byte("x")},
		"colon in name":        {ID: "b", Topic: prefix + ".a", Headers: map[string]string{"X:Y": "1"}, Payload: []byte("x")},
		"empty name":           {ID: "b", Topic: prefix + ".a", Headers: map[string]string{"": "1"}, Payload: []byte("x")},
		"Status, no payload":   {ID: "b", Topic: prefix + ".a", Headers: map[string]string{"Status": "shipped"}},
		"over server payload":  {ID: "b", Topic: prefix + ".a", Payload: make([]byte, 1<<20+1)}, // the test server's max_payload is NATS's 1 MiB default or more
		"over idem.MaxPayload": {ID: "b", Topic: prefix + ".a", Payload: make([]byte, idem.MaxPayload+1)},
	}
	maxPayload := js.Conn().MaxPayload()
	for name, m := range bad {
		if name == "over server payload" && int64(len(m.Payload)) <= maxPayload {
			continue // the server accepts it
		}
		err := sink.Publish(context.Background(), good, m)
		if !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), "message 1 of the batch") {
			t.Errorf("%s: Publish = %v, want idem.ErrInvalid naming message 1", name, err)
		}
	}
	if n := streamMsgs(t, js, stream); n != 0 {
		t.Fatalf("stream holds %d messages after refused batches, want 0", n)
	}
}

// TestNoStream: a subject no stream captures is a backend error that says how to fix it.
func TestNoStream(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	sink := newSink(t, js, idemnats.SinkConfig{})
	m := idem.Message{ID: "x", Topic: "idemtest.nostream." + t.Name(), Payload: []byte("x")}
	for _, batch := range [][]idem.Message{{m}, {m, m}} {
		err := sink.Publish(context.Background(), batch...)
		var be *idem.BackendError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), "EnsureStream") {
			t.Errorf("Publish of %d to a subject without a stream = %v, want a BackendError pointing at EnsureStream", len(batch), err)
		}
	}
}

func TestSinkConfig(t *testing.T) {
	t.Parallel()
	if _, err := idemnats.NewSink(nil, idemnats.SinkConfig{}); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("NewSink(nil) = %v, want idem.ErrInvalid", err)
	}
	_, js := embeddedJS(t)
	if _, err := idemnats.NewSink(js, idemnats.SinkConfig{MaxInFlight: -1}); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), "MaxInFlight") {
		t.Errorf("NewSink(MaxInFlight -1) = %v, want idem.ErrInvalid naming MaxInFlight", err)
	}
}

func TestPublishCancelled(t *testing.T) {
	t.Parallel()
	_, js := embeddedJS(t)
	_, prefix := newStream(t, js)
	sink := newSink(t, js, idemnats.SinkConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sink.Publish(ctx, hundred(prefix)...); !errors.Is(err, context.Canceled) || idem.IsRetryable(err) {
		t.Errorf("Publish with a cancelled ctx = %v, want context.Canceled, not retryable", err)
	}
	if err := sink.Publish(context.Background()); err != nil {
		t.Errorf("Publish of nothing = %v, want nil", err)
	}
}
