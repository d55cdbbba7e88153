package idemnats_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/nats-io/nats.go"
)

// TestServerRestart: messages and the durable consumer's progress are in the file
// store, so a server restarted on the same Dir delivers what was not yet acked.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	const stream = "ORDERS"

	srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js := jsOf(t, nc)
	if _, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: stream, Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]idem.Message, 10)
	for i := range msgs {
		msgs[i] = idem.Message{ID: fmt.Sprintf("o%d", i), Topic: "orders.created", Payload: []byte{byte(i)}}
	}
	publish(t, newSink(t, js, idemnats.SinkConfig{}), msgs...)
	src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "billing"})
	acked := map[string]bool{}
	for _, d := range receiveN(t, src, 4) {
		if err := d.Settler.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		acked[d.ID] = true
	}
	src.Close()
	nc.Close()
	srv.Shutdown()
	srv.Shutdown() // a second Shutdown is harmless

	srv, err = natsserver.StartServer(natsserver.ServerConfig{Dir: dir})
	if err != nil {
		t.Fatalf("restart on the same Dir: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err = nats.Connect(srv.ClientURL()) // over TCP this time
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js = jsOf(t, nc)
	if n := streamMsgs(t, js, stream); n != 10 {
		t.Fatalf("after restart the stream holds %d messages, want 10", n)
	}
	// Republishing within the dedup window is still deduplicated after the restart.
	publish(t, newSink(t, js, idemnats.SinkConfig{}), msgs...)
	if n := streamMsgs(t, js, stream); n != 10 {
		t.Fatalf("after republishing, the stream holds %d messages, want 10", n)
	}
	src = openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "billing"})
	rest := map[string]bool{}
	for len(rest) < 10-len(acked) {
		for _, d := range receiveN(t, src, 1) {
			if acked[d.ID] {
				t.Fatalf("%s was acked before the restart and delivered again", d.ID)
			}
			rest[d.ID] = true
			if err := d.Settler.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestServerMaxPayload: the embedded server carries idem.MaxPayload bytes.
func TestServerMaxPayload(t *testing.T) {
	t.Parallel()
	_, js := embeddedJS(t)
	stream, prefix := newStream(t, js)
	big := bytes.Repeat([]byte("x"), idem.MaxPayload)
	m := idem.Message{ID: "big", Topic: prefix + ".blob", Headers: map[string]string{"a": "b"}, Payload: big}
	publish(t, newSink(t, js, idemnats.SinkConfig{}), m)
	src := openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "d"})
	d := receiveN(t, src, 1)[0]
	if !bytes.Equal(d.Payload, big) {
		t.Fatalf("received %d bytes, want %d", len(d.Payload), len(big))
	}
	ackAll(t, d)
}

func TestStreamConfig(t *testing.T) {
	t.Parallel()
	_, js := embeddedJS(t)
	for name, tc := range map[string]struct {
		cfg   idemnats.StreamConfig
		field string
	}{
		"no name":             {idemnats.StreamConfig{}, "StreamConfig.Name"},
		"wildcard name":       {idemnats.StreamConfig{Name: "A*"}, "StreamConfig.Name"},
		"bad subject":         {idemnats.StreamConfig{Name: "A", Subjects: []string{"a..b"}}, "StreamConfig.Subjects[0]"},
		"negative duplicates": {idemnats.StreamConfig{Name: "A", Duplicates: -1}, "StreamConfig.Duplicates"},
		"max age below dedup": {idemnats.StreamConfig{Name: "A", MaxAge: 1}, "StreamConfig.MaxAge"},
		"replicas 7":          {idemnats.StreamConfig{Name: "A", Replicas: 7}, "StreamConfig.Replicas"},
		"unknown storage":     {idemnats.StreamConfig{Name: "A", Storage: 9}, "StreamConfig.Storage"},
	} {
		if _, err := idemnats.EnsureStream(context.Background(), js, tc.cfg); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: EnsureStream = %v, want idem.ErrInvalid naming %s", name, err, tc.field)
		}
	}
	// The defaults: the name as the subject, a 2 minute dedup window, file storage;
	// ensuring twice is an update, not an error.
	for range 2 {
		st, err := idemnats.EnsureStream(context.Background(), js, idemnats.StreamConfig{Name: "PLAIN"})
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		if len(c.Subjects) != 1 || c.Subjects[0] != "PLAIN" || c.Duplicates != idemnats.DefaultDuplicates || c.Storage != 0 {
			t.Fatalf("stream config = subjects %v, duplicates %v, storage %v", c.Subjects, c.Duplicates, c.Storage)
		}
	}
}
