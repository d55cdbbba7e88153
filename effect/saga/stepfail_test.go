package saga

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/internal/testsvc"
)

// Steps that fail in ways their saga's row cannot hold, or that never return,
// affect their saga only.

// flaky is a one-step saga whose action does what its data says: "panic" panics,
// "loud" fails with an error text of 70 kB holding NUL bytes and invalid UTF-8,
// "loud-permanent" fails so permanently; anything else succeeds.
func flaky() Definition {
	loud := strings.Repeat("\x00\xff refused ", 7000)
	return Definition{Name: "flaky", Steps: []Step{{
		Name:        "work",
		MaxAttempts: 2,
		Action: func(_ context.Context, in Input) ([]byte, error) {
			switch string(in.Data) {
			case "panic":
				var m map[string]int
				//lint:ignore SA5000 the panic is the point: a step that panics is a failed attempt
				m["x"]++ // assignment to entry in nil map
			case "loud":
				return nil, errors.New(loud)
			case "loud-permanent":
				return nil, effect.Permanent(errors.New(loud))
			}
			return []byte("ok"), nil
		},
		Compensate: func(context.Context, Input) error { return nil },
	}}}
}

// A step that panics fails its attempt, as an error does: the saga turns around
// after its attempts, saying why, and the orchestrator goes on with the others.
func TestPanickingStepFailsItsAttempt(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		w := e.watched(t, Config{}, flaky())
		ids := append(startSagas(t, w.Orchestrator, "flaky", "panic", 2, "panic"), startSagas(t, w.Orchestrator, "flaky", "good", 2, "")...)
		w.rounds(t, e, "every saga ended", func() bool { return w.ended(t, ids...) })
		for _, id := range ids {
			inst, _, _ := w.Get(context.Background(), id)
			want := Completed
			if strings.HasPrefix(id, "panic") {
				want = Compensated
				if !strings.Contains(inst.Reason, "step work failed 2 times: do:work panicked: assignment to entry in nil map") {
					t.Errorf("%s: reason %q does not say it panicked", id, inst.Reason)
				}
			}
			if inst.State != want {
				t.Errorf("%s: %s, want %s", id, inst.State, want)
			}
		}
		if n := w.logged("saga: a step panicked"); n != 4 {
			t.Errorf("%d panics logged, want 4 (2 sagas, 2 attempts each)", n)
		}
	})
}

// A step failing with a long error text holding NUL bytes and invalid UTF-8
// (which PostgreSQL refuses in text, and MariaDB's TEXT cannot hold) still turns
// its saga around, its reason cut to fit, and its effect records the failure.
func TestLongErrorTextsFit(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		w := e.watched(t, Config{}, flaky())
		ids := []string{"loud", "loud-permanent", "quiet"}
		for _, id := range ids {
			if _, err := w.Start(ctx, "flaky", id, []byte(strings.TrimPrefix(id, "quiet"))); err != nil {
				t.Fatal(err)
			}
		}
		w.rounds(t, e, "every saga ended", func() bool { return w.ended(t, ids...) })
		a, err := NewAdmin(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids[:2] {
			d, err := a.Get(ctx, id)
			if err != nil || d.State != Compensated || len(d.Reason) > maxReasonLen || !utf8.ValidString(d.Reason) ||
				!strings.Contains(d.Reason, "\uFFFD refused") {
				t.Fatalf("%s: %q (%d bytes), %v; want it compensated, its reason within %d bytes", id, d.State, len(d.Reason), err, maxReasonLen)
			}
			if id == "loud-permanent" && (len(d.Effects) == 0 || d.Effects[0].State != effect.StateFailed || len(d.Effects[0].Reason) > effect.MaxReasonLen) {
				t.Errorf("%s: effects %+v, want do:work failed with its reason cut", id, d.Effects)
			}
		}
	})
}

// A step without a timeout that hangs (until its context ends) is cut at the
// orchestrator's lease, a failed attempt, instead of holding the orchestrator and
// every saga behind it for ever.
func TestHungStepTimesOut(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		def := Definition{Name: "hang", Steps: []Step{{
			Name:        "wait",
			MaxAttempts: 1,
			Action: func(ctx context.Context, in Input) ([]byte, error) {
				if string(in.Data) == "hang" {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return nil, nil
			},
			Compensate: func(context.Context, Input) error { return nil },
		}}}
		o, err := New(ctx, e.db, Config{Lease: time.Second, PollInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, def)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"hang", "good"} {
			if _, err := o.Start(ctx, "hang", id, []byte(id)); err != nil {
				t.Fatal(err)
			}
		}
		go func() { _ = o.Run(ctx) }()
		testsvc.Eventually(t, time.Minute, "both sagas ended", func() bool {
			h, _, _ := o.Get(ctx, "hang")
			g, _, _ := o.Get(ctx, "good")
			return h.State == Compensated && g.State == Completed
		})
		h, _, _ := o.Get(ctx, "hang")
		if !strings.Contains(h.Reason, "context deadline exceeded") {
			t.Errorf("reason %q, want the attempt's deadline", h.Reason)
		}
	})
}
