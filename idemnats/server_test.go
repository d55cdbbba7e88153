package idemnats_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/nats-io/nats.go"
)

// TestServerRestart: messages and the durable consumer's progress are in the file
// store, so a server restarted on the same Dir delivers what was not yet acked.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	const stream = "ORDERS"

	srv, err := idemnats.StartServer(idemnats.ServerConfig{Dir: dir})
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

	srv, err = idemnats.StartServer(idemnats.ServerConfig{Dir: dir})
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

// TestServerSyncsBeforeAck: by default the embedded server syncs every write to
// disk before it acknowledges it (sync_interval: always), so an ack means stored.
func TestServerSyncsBeforeAck(t *testing.T) {
	t.Parallel()
	srv, err := idemnats.StartServer(idemnats.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if always, every := idemnats.JetStreamSync(srv); !always {
		t.Fatalf("the embedded server syncs every %s, acknowledging writes not yet on disk; want sync always", every)
	}
}

// TestServerSyncInterval: a SyncInterval turns syncing before each ack off, for
// nats-server's periodic sync at that interval.
func TestServerSyncInterval(t *testing.T) {
	t.Parallel()
	for _, interval := range []time.Duration{2 * time.Minute, 10 * time.Second} {
		srv, err := idemnats.StartServer(idemnats.ServerConfig{Dir: t.TempDir(), SyncInterval: interval})
		if err != nil {
			t.Fatal(err)
		}
		always, every := idemnats.JetStreamSync(srv)
		srv.Shutdown()
		if always || every != interval.String() {
			t.Errorf("StartServer with SyncInterval %v: JetStream syncs always=%v every %s, want every %v", interval, always, every, interval)
		}
	}
}

func TestServerConfig(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg   idemnats.ServerConfig
		field string
	}{
		"no dir":         {idemnats.ServerConfig{}, "ServerConfig.Dir"},
		"port too large": {idemnats.ServerConfig{Dir: t.TempDir(), Port: 70000}, "ServerConfig.Port"},
		"port -2":        {idemnats.ServerConfig{Dir: t.TempDir(), Port: -2}, "ServerConfig.Port"},
		"negative store": {idemnats.ServerConfig{Dir: t.TempDir(), MaxStore: -1}, "ServerConfig.MaxStore"},
		"negative sync":  {idemnats.ServerConfig{Dir: t.TempDir(), SyncInterval: -time.Second}, "ServerConfig.SyncInterval"},
	} {
		if _, err := idemnats.StartServer(tc.cfg); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: StartServer = %v, want idem.ErrInvalid naming %s", name, err, tc.field)
		}
	}
	// A store directory that cannot be created is reported, not logged and ignored.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := idemnats.StartServer(idemnats.ServerConfig{Dir: filepath.Join(file, "store")})
	var be *idem.BackendError
	if !errors.As(err, &be) {
		if srv != nil {
			srv.Shutdown()
		}
		t.Fatalf("StartServer with a file as the store's parent = %v, want *idem.BackendError", err)
	}
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
