package main

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/operator"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
)

// stepCalls counts each step's calls and fails those told to, once each.
type stepCalls struct {
	mu   sync.Mutex
	n    map[string]int
	fail map[string]error
}

func (c *stepCalls) call(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[op]++
	err := c.fail[op]
	delete(c.fail, op)
	return err
}

func (c *stepCalls) count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

type sagaListJSON struct {
	Sagas []sagaJSON `json:"sagas"`
	Next  string     `json:"next"`
}

type sagaShowJSON struct {
	sagaJSON
	Data       preview            `json:"data"`
	Results    map[string]preview `json:"results"`
	NextAt     time.Time          `json:"next_at"`
	LeaseUntil time.Time          `json:"lease_until"`
	Effects    []effectJSON       `json:"effects"`
	Resolution *saga.Resolution   `json:"resolution"`
}

// Sagas a real Orchestrator drove into failure are listed, shown, retried (and
// then compensated by the orchestrator) and resolved through `idem sagas`.
func TestSagas(t *testing.T) {
	t.Parallel()
	forEachOpsDB(t, true, func(t *testing.T, d opsDB) {
		ctx := context.Background()
		c := &stepCalls{n: map[string]int{}, fail: map[string]error{}}
		def := saga.Definition{Name: "order", Steps: []saga.Step{
			{Name: "reserve",
				Action:     func(context.Context, saga.Input) ([]byte, error) { return []byte("slot\x1b[7"), c.call("reserve") },
				Compensate: func(context.Context, saga.Input) error { return c.call("release") }},
			{Name: "charge", NoCompensation: true,
				Action: func(context.Context, saga.Input) ([]byte, error) { return nil, c.call("charge") }},
		}}
		o, err := saga.New(ctx, d.db, saga.Config{Backoff: func(int) time.Duration { return time.Hour },
			Logger: slog.New(slog.DiscardHandler)}, def)
		if err != nil {
			t.Fatal(err)
		}
		// o-1 and o-2 fail (charge declined, then the release refused); o-3 completes.
		for _, id := range []string{"o-1", "o-2"} {
			c.mu.Lock()
			c.fail["charge"] = effect.Permanent(errors.New("card declined"))
			c.fail["release"] = effect.Permanent(errors.New("stock service refused:\x1b[31m no"))
			c.mu.Unlock()
			if _, err := o.Start(ctx, "order", id, []byte(`{"sku":"A-1"}`)); err != nil {
				t.Fatal(err)
			}
			drive(t, o, id, saga.Failed)
		}
		if _, err := o.Start(ctx, "order", "o-3", nil); err != nil {
			t.Fatal(err)
		}
		drive(t, o, "o-3", saga.Completed)

		db := []string{"--db", d.url}
		cmd := func(action string, args ...string) []string {
			return append(append([]string{"sagas", action}, db...), args...)
		}
		var page sagaListJSON
		decode(t, mustRun(t, cmd("list", "--state", "failed", "--json")...), &page)
		if len(page.Sagas) != 2 || page.Sagas[0].ID != "o-1" || page.Sagas[0].State != saga.Failed ||
			!strings.Contains(page.Sagas[0].Reason, "stock service refused") || page.Next != "" {
			t.Fatalf("sagas list --state failed: %+v", page)
		}
		decode(t, mustRun(t, cmd("list", "--limit", "2", "--json")...), &page)
		if len(page.Sagas) != 2 || page.Next == "" {
			t.Fatalf("sagas list --limit 2: %+v", page)
		}
		decode(t, mustRun(t, cmd("list", "--limit", "2", "--cursor", page.Next, "--json")...), &page)
		if len(page.Sagas) != 1 || page.Sagas[0].ID != "o-3" || page.Sagas[0].State != saga.Completed {
			t.Fatalf("second page: %+v", page)
		}
		wantCode(t, 2, "state", cmd("list", "--state", "sideways")...)
		out := mustRun(t, cmd("list")...)
		noRawControls(t, out)

		var show sagaShowJSON
		decode(t, mustRun(t, cmd("show", "--id", "o-1", "--json")...), &show)
		steps := map[string]string{}
		for _, e := range show.Effects {
			steps[e.Step] = e.State
		}
		if show.State != saga.Failed || show.Data.Preview != `{"sku":"A-1"}` || show.Data.Full != nil ||
			steps["undo:reserve"] != effect.StateFailed || steps["do:charge"] != effect.StateFailed || steps["do:reserve"] != effect.StateComplete {
			t.Fatalf("sagas show --json: %+v", show)
		}
		out = mustRun(t, cmd("show", "--id", "o-1", "--full")...)
		noRawControls(t, out)
		if !strings.Contains(out, "undo:reserve") || !strings.Contains(out, `slot\x1b[7`) || !strings.Contains(out, "full data:") {
			t.Fatalf("sagas show --full:\n%s", out)
		}
		wantCode(t, operator.ExitNotFound, `no saga with id "o-9"`, cmd("show", "--id", "o-9")...)

		// retry: the orchestrator compensates it again, once.
		out = mustRun(t, cmd("retry", "--id", "o-1", "--reason", "stock service fixed")...)
		if !strings.Contains(out, "it was failed, it is compensating") || !strings.Contains(out, "stock service fixed") {
			t.Fatalf("sagas retry:\n%s", out)
		}
		releases := c.count("release")
		drive(t, o, "o-1", saga.Compensated)
		if c.count("release") != releases+1 {
			t.Fatalf("release called %d times after the retry, want once", c.count("release")-releases)
		}
		wantCode(t, operator.ExitConflict, "cannot retry", cmd("retry", "--id", "o-1", "--reason", "again")...)
		wantCode(t, operator.ExitConflict, "cannot retry", cmd("retry", "--id", "o-3", "--reason", "why not")...)
		wantCode(t, operator.ExitNotFound, "nothing done", cmd("retry", "--id", "o-9", "--reason", "ghost")...)

		// resolve
		var res struct {
			ID       string `json:"id"`
			Action   string `json:"action"`
			Previous string `json:"previous_state"`
			State    string `json:"state"`
			Text     string `json:"text"`
		}
		decode(t, mustRun(t, cmd("resolve", "--id", "o-2", "--note", "stock released by hand, ticket OPS-7", "--json")...), &res)
		if res.Action != "resolve" || res.Previous != saga.Failed || res.State != saga.Resolved || res.Text != "stock released by hand, ticket OPS-7" {
			t.Fatalf("sagas resolve --json: %+v", res)
		}
		decode(t, mustRun(t, cmd("show", "--id", "o-2", "--json")...), &show)
		if show.Resolution == nil || show.Resolution.PreviousState != saga.Failed || show.Resolution.Note != res.Text {
			t.Fatalf("resolved saga: %+v", show)
		}
		wantCode(t, operator.ExitConflict, "cannot resolve", cmd("resolve", "--id", "o-2", "--note", "twice")...)
		wantCode(t, operator.ExitNotFound, "nothing done", cmd("resolve", "--id", "o-9", "--note", "ghost")...)
	})
}

// drive runs o's rounds until saga id is in state.
func drive(t *testing.T, o *saga.Orchestrator[*sql.Tx], id, state string) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		if _, err := o.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		inst, ok, err := o.Get(ctx, id)
		if err != nil || !ok {
			t.Fatalf("saga %s: %v, %v", id, ok, err)
		}
		if inst.State == state {
			return
		}
	}
	t.Fatalf("saga %s did not become %s in 100 rounds", id, state)
}
