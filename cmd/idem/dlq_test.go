package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/operator"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
)

// listSource is an in-memory broker: each message is delivered until acked, a nak
// puts it back. The real brokers run the inbox's flows in the adapters' tests.
type listSource struct {
	mu    sync.Mutex
	queue []idem.Message
	wake  chan struct{}
	next  int
}

func newListSource(msgs ...idem.Message) *listSource {
	return &listSource{queue: msgs, wake: make(chan struct{}, 1)}
}

func (s *listSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			var out []idem.Delivery
			for len(s.queue) > 0 && len(out) < max {
				s.next++
				m := s.queue[0]
				s.queue = s.queue[1:]
				out = append(out, idem.Delivery{Message: m, Position: fmt.Sprintf("seq %d", s.next), Settler: listSettler{s, m}})
			}
			s.mu.Unlock()
			return out, nil
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.wake:
		}
	}
}

func (s *listSource) Close() error { return nil }

type listSettler struct {
	s *listSource
	m idem.Message
}

func (l listSettler) Ack(context.Context) error { return nil }

func (l listSettler) Nak(context.Context, time.Duration) error {
	l.s.mu.Lock()
	l.s.queue = append(l.s.queue, l.m)
	l.s.mu.Unlock()
	select {
	case l.s.wake <- struct{}{}:
	default:
	}
	return nil
}

// dlqJSON is the --json document of `idem dlq list`.
type dlqJSON struct {
	DeadLetters []deadLetter `json:"dead_letters"`
	NextAfter   int64        `json:"next_after"`
}

// startBilling runs consumer "billing" on d until the test ends. Its handler fails
// each message permanently, with the message's "why" header as reason, until fixed
// is set; then it applies it, counted in applied.
func startBilling(t *testing.T, d opsDB, src idem.Source, fixed *atomic.Bool, applied *sync.Map) {
	t.Helper()
	h := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		if !fixed.Load() {
			return inbox.Permanent(errors.New(m.Headers["why"]))
		}
		n, _ := applied.LoadOrStore(m.ID, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		return nil
	}
	c, err := inbox.New(context.Background(), src, d.db, d.store, h,
		inbox.Config{Consumer: "billing", ReplayPollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("consumer Run = %v, want context.Canceled", err)
		}
	})
}

// Dead letters made by a real inbox.Consumer are listed, filtered, shown, replayed
// (by that consumer, once) and discarded through `idem dlq`.
func TestDLQ(t *testing.T) {
	t.Parallel()
	forEachOpsDB(t, true, func(t *testing.T, d opsDB) {
		ctx := context.Background()
		msgs := []idem.Message{
			{ID: "m-1", Topic: "orders", Headers: map[string]string{"why": "card \x1b[31mdeclined\x1b[0m\nretry: no"},
				Payload: append([]byte("\x00\xffbinary"), make([]byte, 100)...)},
			{ID: "m-2", Topic: "orders", Headers: map[string]string{"why": "Address missing"}, Payload: []byte(`{"order":2}`)},
			{ID: "m-3", Topic: "refunds", Headers: map[string]string{"why": "unknown refund"}, Payload: []byte(`{"refund":3}`)},
		}
		var fixed atomic.Bool
		var applied sync.Map
		startBilling(t, d, newListSource(msgs...), &fixed, &applied)
		admin := inbox.NewDeadLetterAdmin(d.db)
		testsvc.Eventually(t, time.Minute, "3 dead letters", func() bool {
			dls, err := admin.List(ctx, inbox.DeadLetterFilter{})
			return err == nil && len(dls) == 3
		})
		db := []string{"--db", d.url}
		dlq := func(action string, args ...string) []string {
			return append(append([]string{"dlq", action}, db...), args...)
		}

		// list and its filters
		var page dlqJSON
		decode(t, mustRun(t, dlq("list", "--json")...), &page)
		if len(page.DeadLetters) != 3 || page.NextAfter != 0 {
			t.Fatalf("dlq list --json: %+v", page)
		}
		ids := map[string]int64{}
		for _, dl := range page.DeadLetters {
			ids[dl.MessageID] = dl.ID
		}
		first := page.DeadLetters[0]
		if first.MessageID != "m-1" || first.Consumer != "billing" || first.Kind != "permanent" || first.State != inbox.StatePending ||
			first.Payload.Size != 108 || first.Payload.Encoding != "hex" || first.Payload.Full != nil || first.Topic != "orders" ||
			!strings.Contains(first.Reason, "declined") || first.DeadAt.IsZero() {
			t.Fatalf("first dead letter: %+v", first)
		}
		for args, want := range map[string]int{
			"--kind permanent --reason ADDRESS": 1, "--consumer other": 0, "--since 1h": 3, "--until 1h": 0,
			"--consumer billing --kind max_attempts": 0, fmt.Sprintf("--after %d", ids["m-1"]): 2,
		} {
			decode(t, mustRun(t, dlq("list", append(strings.Fields(args), "--json")...)...), &page)
			if len(page.DeadLetters) != want {
				t.Errorf("dlq list %s: %d letters, want %d", args, len(page.DeadLetters), want)
			}
		}
		decode(t, mustRun(t, dlq("list", "--limit", "2", "--json")...), &page)
		if len(page.DeadLetters) != 2 || page.NextAfter != ids["m-2"] {
			t.Fatalf("dlq list --limit 2: %+v", page)
		}
		out := mustRun(t, dlq("list", "--limit", "2")...)
		noRawControls(t, out)
		if !strings.Contains(out, `card \x1b[31mdeclined\x1b[0m\x0aretry: no`) || !strings.Contains(out, "more: --after "+strconv.FormatInt(ids["m-2"], 10)) {
			t.Fatalf("dlq list table:\n%s", out)
		}

		// show
		id1 := strconv.FormatInt(ids["m-1"], 10)
		out = mustRun(t, dlq("show", "--id", id1)...)
		noRawControls(t, out)
		if !strings.Contains(out, "hex:00ff") || !strings.Contains(out, "(108 bytes)") || strings.Contains(out, "full payload") {
			t.Fatalf("dlq show:\n%s", out)
		}
		var dl deadLetter
		decode(t, mustRun(t, dlq("show", "--id", id1, "--json", "--full")...), &dl)
		if string(dl.Payload.Full) != string(msgs[0].Payload) || dl.Headers["why"] != msgs[0].Headers["why"] {
			t.Fatalf("dlq show --full --json: %+v", dl)
		}
		wantCode(t, operator.ExitNotFound, "no dead letter with id 999999", dlq("show", "--id", "999999")...)

		// replay: requested here, performed by the running consumer, once.
		fixed.Store(true)
		out = mustRun(t, dlq("replay", "--id", id1, "--reason", "card processor fixed")...)
		if !strings.Contains(out, "requested") || !strings.Contains(out, "billing") || !strings.Contains(out, "exactly once") {
			t.Fatalf("dlq replay:\n%s", out)
		}
		testsvc.Eventually(t, time.Minute, "the consumer to replay "+id1, func() bool {
			decode(t, mustRun(t, dlq("show", "--id", id1, "--json")...), &dl)
			return dl.State == inbox.StateReplayed
		})
		if n, ok := applied.Load("m-1"); !ok || n.(*atomic.Int64).Load() != 1 {
			t.Fatalf("m-1 applied %v times by the replay, want once", n)
		}
		var rep struct {
			Replays []struct {
				ID       int64  `json:"id"`
				Outcome  string `json:"outcome"`
				Consumer string `json:"consumer"`
			} `json:"replays"`
			Note string `json:"note"`
		}
		wantCode(t, operator.ExitConflict, "replayed or discarded already", dlq("replay", "--id", id1)...)
		out = wantCode(t, operator.ExitNotFound, "no dead letter with id 999999", dlq("replay", "--id", id1+",999999", "--json")...)
		decode(t, out, &rep)
		if len(rep.Replays) != 2 || rep.Replays[0].Outcome != inbox.ReplayAlreadyDone || rep.Replays[1].Outcome != inbox.ReplayNotFound {
			t.Fatalf("dlq replay of a replayed and an unknown id: %+v", rep)
		}

		// discard
		id2 := strconv.FormatInt(ids["m-2"], 10)
		out = mustRun(t, dlq("discard", "--id", id2, "--reason", "order cancelled\x07")...)
		noRawControls(t, out)
		if !strings.Contains(out, "discarded dead letter "+id2) || !strings.Contains(out, `order cancelled\x07`) {
			t.Fatalf("dlq discard:\n%s", out)
		}
		decode(t, mustRun(t, dlq("show", "--id", id2, "--json")...), &dl)
		if dl.State != inbox.StateDiscarded || dl.DiscardReason != "order cancelled\x07" {
			t.Fatalf("discarded letter: %+v", dl)
		}
		wantCode(t, operator.ExitConflict, "nothing discarded", dlq("discard", "--id", id2, "--reason", "again")...)
		wantCode(t, operator.ExitNotFound, "nothing discarded", dlq("discard", "--id", "999999", "--reason", "gone")...)
		wantCode(t, operator.ExitConflict, "already", dlq("replay", "--id", id2)...)
		if _, ok := applied.Load("m-2"); ok {
			t.Fatal("the discarded letter was applied")
		}

		// Only m-3 is open; --all shows the closed ones too.
		decode(t, mustRun(t, dlq("list", "--json")...), &page)
		if len(page.DeadLetters) != 1 || page.DeadLetters[0].MessageID != "m-3" {
			t.Fatalf("open letters after a replay and a discard: %+v", page)
		}
		decode(t, mustRun(t, dlq("list", "--all", "--json")...), &page)
		if len(page.DeadLetters) != 3 {
			t.Fatalf("dlq list --all: %+v", page)
		}
	})
}
