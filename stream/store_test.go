package stream_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
)

// forEachStore runs fn on every Store: SQLite, Postgres and Redis, each with a
// clock the test can move.
func forEachStore(t *testing.T, fn func(t *testing.T, s stream.Store, clock *chaos.Clock)) {
	forEachStoreWith(t, 0, fn)
}

// forEachStoreWith is forEachStore with the stores' MaxClients set.
func forEachStoreWith(t *testing.T, maxClients int, fn func(t *testing.T, s stream.Store, clock *chaos.Clock)) {
	for _, name := range []string{"sqlite", "postgres", "redis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := &chaos.Clock{}
			var s stream.Store
			var err error
			switch name {
			case "sqlite", "postgres":
				db := sqltest.SQLite(t)
				if name == "postgres" {
					db = sqltest.Postgres(t)
				}
				s, err = stream.NewSQLStore(context.Background(), db, stream.SQLConfig{Now: clock.Now, MaxClients: maxClients})
			case "redis":
				testsvc.Reach(t, "redis", testsvc.RedisAddr())
				c := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
				t.Cleanup(func() { c.Close() })
				s, err = stream.NewRedisStore(c, stream.RedisConfig{Prefix: testsvc.RedisPrefix(t), Now: clock.Now, MaxClients: maxClients})
			}
			if err != nil {
				t.Fatal(err)
			}
			fn(t, s, clock)
		})
	}
}

// The Store contract, on every backend.
func TestStoreContract(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s stream.Store, clock *chaos.Clock) {
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
	})
}

// Trim waits for every client it knows, but not forever: a client not seen for
// the ClientExpiry, or beyond the MaxClients most recently seen of its
// channel, is forgotten, and what it had not acked may go.
func TestTrimForgetsClientsThatDoNotComeBack(t *testing.T) {
	t.Parallel()
	forEachStoreWith(t, 3, func(t *testing.T, s stream.Store, clock *chaos.Clock) {
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
	})
}
