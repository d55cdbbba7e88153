// Package streamtest holds the conformance suite every stream.Store runs, so the
// SQL stores of package stream and the Redis store of idemredis are held to one
// contract:
//
//	func TestStoreSuite(t *testing.T) {
//		streamtest.StoreSuite(t, streamtest.Harness{
//			New: func(t *testing.T, cfg streamtest.Config) stream.Store { return newTestStore(t, cfg) },
//		})
//	}
//
// The suite moves the stores' clocks instead of waiting for time to pass, and
// waits for clients by polling, never by asserting how long something took.
package streamtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
)

// Config is what the suite asks of a store it makes.
type Config struct {
	// Now is the store's clock (its event times, retention and client expiry).
	Now func() time.Time
	// MaxClients is how many clients per channel the store remembers; 0 means
	// stream.DefaultMaxClients.
	MaxClients int
}

// Harness tells StoreSuite how to make stores of one backend.
type Harness struct {
	// New returns a fresh store configured with cfg whose channels no other
	// subtest sees (its own schema, database file or key prefix). Cleanup is
	// registered on t. Required.
	New func(t *testing.T, cfg Config) stream.Store
}

// StoreSuite runs the stream.Store contract against h's backend, each test in
// a parallel subtest.
func StoreSuite(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("streamtest: Harness.New is required")
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Contract", testContract},
		{"TrimForgetsClientsThatDoNotComeBack", testTrimForgetsClients},
		{"DroppedConnectionsLoseNothing", testDroppedConnections},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// testContract: seqs without gaps under concurrent appends, paging, keyed
// appends, hints, bad input naming the field, and Trim by acks and by age.
func testContract(t *testing.T, h Harness) {
	clock := &chaos.Clock{}
	s := h.New(t, Config{Now: clock.Now})
	ctx := context.Background()
	if h, err := s.Head(ctx, "empty"); err != nil || h != 0 {
		t.Fatalf("Head of a new channel = %d, %v", h, err)
	}
	// Concurrent appends get every seq exactly once.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if _, err := s.Append(ctx, "c", stream.Event{Type: "t", Data: json.RawMessage(`{"x":1}`)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	evs, err := s.Read(ctx, "c", 0, 1000)
	if err != nil || len(evs) != 80 {
		t.Fatalf("Read = %d events, %v; want 80", len(evs), err)
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) || string(e.Data) != `{"x":1}` || e.Type != "t" {
			t.Fatalf("event %d = %+v", i, e)
		}
	}
	if page, err := s.Read(ctx, "c", 70, 5); err != nil || len(page) != 5 || page[0].Seq != 71 {
		t.Fatalf("Read(since 70, limit 5) = %v, %v", page, err)
	}
	// Keys make an append idempotent; a hint has no data.
	a, _ := s.Append(ctx, "c", stream.Event{Type: "paid", ID: "o-1", Key: "k1"})
	b, err := s.Append(ctx, "c", stream.Event{Type: "paid", ID: "o-1", Key: "k1"})
	if err != nil || a.Seq != 81 || b.Seq != 81 || !b.Hint() {
		t.Fatalf("keyed appends: %+v, %+v, %v", a, b, err)
	}
	if h, _ := s.Head(ctx, "c"); h != 81 {
		t.Fatalf("Head = %d, want 81", h)
	}
	// Bad input names the field.
	for _, tc := range []struct {
		ch    string
		e     stream.Event
		field string
	}{{"", stream.Event{Type: "t"}, "channel"}, {"c", stream.Event{}, "Event.Type"}, {"c", stream.Event{Type: "t", Data: json.RawMessage(`{`)}, "Event.Data"}} {
		_, err := s.Append(ctx, tc.ch, tc.e)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("Append(%q, %+v): %v, want an InputError on %s", tc.ch, tc.e, err, tc.field)
		}
	}
	// Trim: what every client acked, then what is past the retention.
	if err := s.Ack(ctx, "c", "phone", 50); err != nil {
		t.Fatal(err)
	}
	_ = s.Ack(ctx, "c", "laptop", 30)
	_ = s.Ack(ctx, "c", "laptop", 20) // lower: ignored
	if n, err := s.Trim(ctx, time.Hour); err != nil || n != 30 {
		t.Fatalf("Trim = %d, %v; want the 30 both clients acked", n, err)
	}
	if _, err := s.Read(ctx, "c", 10, 10); !errors.Is(err, stream.ErrTrimmed) {
		t.Fatalf("Read behind the trim: %v, want ErrTrimmed", err)
	}
	if page, err := s.Read(ctx, "c", 30, 1); err != nil || page[0].Seq != 31 {
		t.Fatalf("Read at the trim point: %v, %v", page, err)
	}
	clock.Jump(2 * time.Hour)
	if n, err := s.Trim(ctx, time.Hour); err != nil || n != 51 {
		t.Fatalf("Trim past retention = %d, %v; want the 51 left", n, err)
	}
}

// testTrimForgetsClients: Trim waits for every client it knows, but not
// forever: a client not seen for the ClientExpiry, or beyond the MaxClients
// most recently seen of its channel, is forgotten, and what it had not acked
// may go.
func testTrimForgetsClients(t *testing.T, h Harness) {
	clock := &chaos.Clock{}
	s := h.New(t, Config{Now: clock.Now, MaxClients: 3})
	ctx := context.Background()
	const keep = 1000 * time.Hour // retention: only acks trim here
	for range 10 {
		if _, err := s.Append(ctx, "c", stream.Event{Type: "t"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, "d", stream.Event{Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Ack(ctx, "c", "fast", 8)
	_ = s.Ack(ctx, "c", "gone", 2)
	if n, err := s.Trim(ctx, keep); err != nil || n != 2 {
		t.Fatalf("Trim = %d, %v; want the 2 both clients acked", n, err)
	}
	clock.Jump(stream.DefaultClientExpiry / 2)
	_ = s.Ack(ctx, "c", "fast", 9)
	_ = s.Ack(ctx, "c", "gone", 1) // lower: only refreshes
	clock.Jump(stream.DefaultClientExpiry/2 + time.Minute)
	if n, err := s.Trim(ctx, keep); err != nil || n != 0 {
		t.Fatalf("Trim = %d, %v; want 0: an ack below the row refreshes it", n, err)
	}
	_ = s.Ack(ctx, "c", "fast", 9) // fast keeps coming back; gone does not
	clock.Jump(stream.DefaultClientExpiry / 2)
	if n, err := s.Trim(ctx, keep); err != nil || n != 7 {
		t.Fatalf("Trim after the slow client expired = %d, %v; want 7 (3..9)", n, err)
	}
	// Channel d: four clients, three kept; the least recently seen goes.
	_ = s.Ack(ctx, "d", "old", 1)
	for _, id := range []string{"x", "y", "z"} {
		clock.Jump(time.Second)
		_ = s.Ack(ctx, "d", id, 10)
	}
	if n, err := s.Trim(ctx, keep); err != nil || n != 10 {
		t.Fatalf("Trim over MaxClients = %d, %v; want 10 (the oldest client forgotten)", n, err)
	}
}

// testDroppedConnections: a Server on the store, its connections dropped again
// and again while events are appended, by the server (Kick) and by the network
// (a TCP proxy cut). Every client ends with exactly the appended sequence, no
// gaps, no repeats.
func testDroppedConnections(t *testing.T, h Harness) {
	srv, err := stream.NewServer(h.New(t, Config{}), stream.ServerConfig{AllowAnonymous: true, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })
	proxy, err := chaos.NewProxy("stream", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	const n, clients = 400, 6
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recs := make([]*Recorder, clients)
	var wg sync.WaitGroup
	for i := range clients {
		recs[i] = &Recorder{}
		base := hs.URL
		if i%2 == 1 {
			base = "http://" + proxy.Addr() // half the clients cross the cut network
		}
		c, err := stream.NewClient(stream.ClientConfig{URL: base, Channel: "user:1", ID: fmt.Sprint("dev-", i),
			OnEvent: recs[i].OnEvent, MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = c.Run(ctx) })
	}
	for i := range n {
		if _, err := srv.Append(ctx, "user:1", stream.Event{Type: "order.updated", ID: fmt.Sprint("o-", i),
			Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
		switch i % 40 {
		case 20:
			srv.Kick("user:1")
		case 0:
			_ = proxy.Cut(time.Millisecond)
		}
	}
	for i, r := range recs {
		testsvc.Eventually(t, time.Minute, fmt.Sprintf("client %d to catch up", i), func() bool { return len(r.Seqs()) >= n })
	}
	cancel()
	wg.Wait()
	for i, r := range recs {
		CheckSeqs(t, fmt.Sprint("client ", i), r.Seqs(), n)
	}
	if proxy.Cuts() == 0 {
		t.Fatal("the network was never cut")
	}
}

// Recorder collects the seqs a client delivered: pass its OnEvent as
// stream.ClientConfig.OnEvent. It is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	seqs []uint64
}

// OnEvent records e's seq.
func (r *Recorder) OnEvent(e stream.Event) error {
	r.mu.Lock()
	r.seqs = append(r.seqs, e.Seq)
	r.mu.Unlock()
	return nil
}

// Seqs returns a copy of the seqs recorded so far, in delivery order.
func (r *Recorder) Seqs() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.seqs...)
}

// CheckSeqs fails t unless got is exactly 1 to n in order: no gap, no repeat.
// who names the client in the failure.
func CheckSeqs(t testing.TB, who string, got []uint64, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%s received %d events, want %d", who, len(got), n)
	}
	for i, s := range got {
		if s != uint64(i+1) {
			t.Fatalf("%s: event %d has seq %d, want %d (gap or repeat)", who, i, s, i+1)
		}
	}
}
