package main

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/operator"
	"github.com/idemhq/idem/outbox"
)

// flakySink fails every publish while down, and records what it published.
type flakySink struct {
	down      atomic.Bool
	mu        sync.Mutex
	published []string
}

func (s *flakySink) Publish(_ context.Context, msgs ...idem.Message) error {
	if s.down.Load() {
		return errors.New("broker refused: \x1b[31mquota\x1b[0m")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.published = append(s.published, m.ID)
	}
	return nil
}

func (s *flakySink) Close() error { return nil }

type outboxStatusJSON struct {
	Partitions    []operator.PartitionJSON `json:"partitions"`
	Unpublished   int64                    `json:"unpublished"`
	Parked        int64                    `json:"parked"`
	Discarded     int64                    `json:"discarded"`
	OldestAgeSecs float64                  `json:"oldest_age_seconds"`
	Relays        []operator.RelayJSON     `json:"relays"`
}

type parkedPageJSON struct {
	Parked    []parkedJSON `json:"parked"`
	NextAfter int64        `json:"next_after"`
}

// Messages a real relay parked are shown, retried (and then published by the
// relay) and discarded through `idem outbox`; status shows the backlog and the
// relays, a silent one flagged stale.
func TestOutboxStatusParkedRetry(t *testing.T) {
	t.Parallel()
	forEachOpsDB(t, true, func(t *testing.T, d opsDB) {
		ctx := context.Background()
		ob, err := outbox.New(ctx, d.db, outbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		enqueue := func(msgs ...idem.Message) {
			t.Helper()
			if err := d.db.InTx(ctx, func(tx *sql.Tx) error { _, err := ob.EnqueueTx(ctx, tx, msgs...); return err }); err != nil {
				t.Fatal(err)
			}
		}
		sink := &flakySink{}
		sink.down.Store(true)
		relay, err := ob.Relay(sink, outbox.RelayConfig{MaxAttempts: 1, Instance: "relay-a", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		enqueue(idem.Message{ID: "a-1", Topic: "orders", Payload: []byte(`{"order":1}`)},
			idem.Message{ID: "a-2", Topic: "orders", Payload: []byte(`{"order":2}`)},
			idem.Message{ID: "b-1", Topic: "mail", Payload: []byte("\x1b]0;pwned\x07 hello")})
		admin := outbox.NewAdmin(d.db)
		for i := 0; ; i++ {
			_, _ = relay.RunOnce(ctx)
			ps, err := admin.Parked(ctx, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) == 3 {
				break
			}
			if i == 50 {
				t.Fatalf("the relay parked %d messages after 50 rounds, want 3", len(ps))
			}
		}
		enqueue(idem.Message{ID: "c-1", Topic: "orders", Payload: []byte(`{"order":3}`)})
		// A relay that last reported ten minutes ago.
		old := time.Now().Add(-10 * time.Minute).UnixMilli()
		if err := d.db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := d.db.Querier(tx).Exec(ctx, `INSERT INTO idem_outbox_relays (instance, host, pid, started_at, last_round_at,
				poll_interval_ms, published_total, last_error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
				"relay-old", "host-b", 42, old, old, 1000, 7, "")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		db := []string{"--db", d.url}
		cmd := func(action string, args ...string) []string {
			return append(append([]string{"outbox", action}, db...), args...)
		}

		var st outboxStatusJSON
		decode(t, mustRun(t, cmd("status", "--json")...), &st)
		relays := map[string]operator.RelayJSON{}
		for _, r := range st.Relays {
			relays[r.Instance] = r
		}
		if st.Unpublished != 1 || st.Parked != 3 || st.Discarded != 0 || len(st.Partitions) == 0 ||
			len(relays) != 2 || relays["relay-a"].Stale || !relays["relay-old"].Stale || relays["relay-old"].PublishedTotal != 7 {
			t.Fatalf("outbox status --json: %+v", st)
		}
		out := mustRun(t, cmd("status")...)
		noRawControls(t, out)
		if !strings.Contains(out, "STALE") || !strings.Contains(out, "relay-a") || !strings.Contains(out, "total") {
			t.Fatalf("outbox status:\n%s", out)
		}

		var pp parkedPageJSON
		decode(t, mustRun(t, cmd("parked", "--json")...), &pp)
		ids := map[string]int64{}
		for _, p := range pp.Parked {
			ids[p.MessageID] = p.ID
		}
		if len(ids) != 3 || pp.NextAfter != 0 || pp.Parked[0].Attempts != 1 || !strings.Contains(pp.Parked[0].LastError, "quota") {
			t.Fatalf("outbox parked --json: %+v", pp)
		}
		decode(t, mustRun(t, cmd("parked", "--json", "--limit", "2")...), &pp)
		if len(pp.Parked) != 2 || pp.NextAfter != pp.Parked[1].ID {
			t.Fatalf("outbox parked --limit 2: %+v", pp)
		}
		out = mustRun(t, cmd("parked")...)
		noRawControls(t, out)
		// Not printable text: previewed as hex, as the admin API and the console show it.
		if !strings.Contains(out, `hex:1b5d303b70776e6564072068656c6c6f (16 bytes)`) {
			t.Fatalf("outbox parked:\n%s", out)
		}

		// retry: the relay publishes it at its next round.
		a1 := strconv.FormatInt(ids["a-1"], 10)
		if out = mustRun(t, cmd("retry", "--id", a1)...); !strings.Contains(out, "retried outbox message "+a1) {
			t.Fatalf("outbox retry:\n%s", out)
		}
		wantCode(t, operator.ExitNotFound, "no parked message with id 999999", cmd("retry", "--id", "999999")...)
		sink.down.Store(false)
		for i := 0; i < 50 && st.Unpublished > 0; i++ {
			_, _ = relay.RunOnce(ctx)
			decode(t, mustRun(t, cmd("status", "--json")...), &st)
		}
		sink.mu.Lock()
		published := strings.Join(sink.published, ",")
		sink.mu.Unlock()
		if st.Unpublished != 0 || st.Parked != 2 || !strings.Contains(published, "a-1") || strings.Contains(published, "a-2") {
			t.Fatalf("after the retry the relay published %q; status %+v", published, st)
		}
		wantCode(t, operator.ExitNotFound, "nothing retried", cmd("retry", "--id", a1)...)

		// discard
		b1 := strconv.FormatInt(ids["b-1"], 10)
		var disc struct {
			Discarded int64  `json:"discarded"`
			Reason    string `json:"reason"`
		}
		decode(t, mustRun(t, cmd("discard", "--id", b1, "--reason", "mailbox closed", "--json")...), &disc)
		if disc.Discarded != ids["b-1"] || disc.Reason != "mailbox closed" {
			t.Fatalf("outbox discard --json: %+v", disc)
		}
		wantCode(t, operator.ExitNotFound, "nothing discarded", cmd("discard", "--id", b1, "--reason", "again")...)
		wantCode(t, operator.ExitNotFound, "nothing retried", cmd("retry", "--id", b1)...)
		decode(t, mustRun(t, cmd("status", "--json")...), &st)
		if st.Parked != 1 || st.Discarded != 1 {
			t.Fatalf("status after a discard: %+v", st)
		}
		if out = mustRun(t, cmd("parked")...); !strings.Contains(out, "discarded: mailbox closed") {
			t.Fatalf("outbox parked after a discard:\n%s", out)
		}
	})
}
