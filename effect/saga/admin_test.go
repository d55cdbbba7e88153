package saga

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
)

// calls counts the calls of each step of a saga, and fails those told to.
type calls struct {
	mu   sync.Mutex
	n    map[string]int
	fail map[string]error // op → the error its next call returns (once)
}

func (c *calls) call(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[op]++
	err := c.fail[op]
	delete(c.fail, op)
	return err
}

func (c *calls) count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// adminSaga is reserve → charge: charge's action and reserve's compensation fail
// as c says.
func adminSaga(c *calls) Definition {
	return Definition{Name: "order", Steps: []Step{
		{Name: "reserve",
			Action:     func(context.Context, Input) ([]byte, error) { return nil, c.call("reserve") },
			Compensate: func(context.Context, Input) error { return c.call("release") }},
		{Name: "charge", NoCompensation: true,
			Action: func(context.Context, Input) ([]byte, error) { return nil, c.call("charge") }},
	}}
}

type adminEnv struct {
	db    idemsql.TxDB[*sql.Tx]
	o     *Orchestrator[*sql.Tx]
	admin *Admin[*sql.Tx]
	calls *calls
}

// newAdminEnv makes an orchestrator on the real clock whose transient failures
// back off for an hour (a saga waiting that long is stuck), and an Admin.
func newAdminEnv(t *testing.T, db idemsql.TxDB[*sql.Tx]) adminEnv {
	t.Helper()
	c := &calls{n: map[string]int{}, fail: map[string]error{}}
	o, err := New(context.Background(), db, Config{PollInterval: 10 * time.Millisecond,
		Backoff: func(int) time.Duration { return time.Hour }}, adminSaga(c))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAdmin(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return adminEnv{db, o, a, c}
}

// run runs the orchestrator until the test ends.
func (e adminEnv) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.o.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (e adminEnv) waitFor(t *testing.T, id, state string) Detail {
	t.Helper()
	var d Detail
	testsvc.Eventually(t, time.Minute, "saga "+id+" to be "+state, func() bool {
		var err error
		d, err = e.admin.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return d.State == state
	})
	return d
}

func effectStates(d Detail) map[string]string {
	m := map[string]string{}
	for _, e := range d.Effects {
		m[e.Step] = e.State
	}
	return m
}

// A saga whose compensation failed permanently (Failed) is compensated by a
// running orchestrator once RetryStep puts it back; the retry needs a reason.
func TestAdminRetryFailedSaga(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, env env) {
		ctx := context.Background()
		e := newAdminEnv(t, env.db)
		e.calls.fail["charge"] = effect.Permanent(errors.New("card declined"))
		e.calls.fail["release"] = effect.Permanent(errors.New("stock service refused"))
		if _, err := e.o.Start(ctx, "order", "o-1", nil); err != nil {
			t.Fatal(err)
		}
		e.run(t)
		d := e.waitFor(t, "o-1", Failed)
		if !strings.Contains(d.Reason, "stock service refused") || d.Step != 0 {
			t.Fatalf("failed saga: %+v", d)
		}
		if got := effectStates(d); got["undo:reserve"] != effect.StateFailed || got["do:charge"] != effect.StateFailed || got["do:reserve"] != effect.StateComplete {
			t.Fatalf("failed saga's effects: %v", got)
		}

		var ie *idem.InputError
		if err := e.admin.RetryStep(ctx, "o-1", " "); !errors.As(err, &ie) || ie.Field != "reason" {
			t.Fatalf("RetryStep without a reason: %v, want an *idem.InputError on reason", err)
		}
		if err := e.admin.RetryStep(ctx, "o-1", "the stock service is fixed"); err != nil {
			t.Fatal(err)
		}
		d = e.waitFor(t, "o-1", Compensated)
		if e.calls.count("release") != 2 || e.calls.count("charge") != 1 || e.calls.count("reserve") != 1 {
			t.Fatalf("calls after the retry: %v, want release twice, each action once", e.calls.n)
		}
		if got := effectStates(d); got["undo:reserve"] != effect.StateComplete || got["do:charge"] != effect.StateFailed {
			t.Fatalf("retried saga's effects: %v", got)
		}
		if !strings.Contains(d.Reason, "retried by hand") || !strings.Contains(d.Reason, "the stock service is fixed") {
			t.Fatalf("the retry's reason is not recorded: %q", d.Reason)
		}
		var se *StateError
		if err := e.admin.RetryStep(ctx, "o-1", "again"); !errors.As(err, &se) || se.State != Compensated {
			t.Fatalf("RetryStep of a compensated saga: %v, want a *StateError", err)
		}
	})
}

// A saga stuck in a long backoff after a transient failure is run now, to its
// end, once RetryStep clears the backoff; a completed saga cannot be retried.
func TestAdminRetryStuckSaga(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, env env) {
		ctx := context.Background()
		e := newAdminEnv(t, env.db)
		e.calls.fail["charge"] = errors.New("timeout")
		if _, err := e.o.Start(ctx, "order", "o-1", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.o.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d, err := e.admin.Get(ctx, "o-1")
		if err != nil || d.State != Running || d.Step != 1 || d.Attempts != 1 || time.Until(d.NextAt) < 30*time.Minute {
			t.Fatalf("saga after a transient failure: %+v, %v; want running at step 1, next in an hour", d, err)
		}
		if err := e.admin.RetryStep(ctx, "o-1", "the payment service is back"); err != nil {
			t.Fatal(err)
		}
		e.run(t)
		e.waitFor(t, "o-1", Completed)
		if e.calls.count("charge") != 2 {
			t.Fatalf("charge called %d times, want 2", e.calls.count("charge"))
		}
		var se *StateError
		if err := e.admin.RetryStep(ctx, "o-1", "again"); !errors.As(err, &se) || se.State != Completed || se.Op != "retry" {
			t.Fatalf("RetryStep of a completed saga: %v, want a *StateError", err)
		}
		if err := e.admin.Resolve(ctx, "o-1", "done already"); !errors.As(err, &se) || se.State != Completed {
			t.Fatalf("Resolve of a completed saga: %v, want a *StateError", err)
		}
	})
}

// A resolved saga is never advanced again: the orchestrator runs the sagas after
// it and never calls its steps; its note, time and previous state are recorded.
func TestAdminResolvedSagaIsNeverAdvanced(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, env env) {
		ctx := context.Background()
		e := newAdminEnv(t, env.db)
		if _, err := e.o.Start(ctx, "order", "o-1", nil); err != nil {
			t.Fatal(err)
		}
		var ie *idem.InputError
		if err := e.admin.Resolve(ctx, "o-1", ""); !errors.As(err, &ie) || ie.Field != "note" {
			t.Fatalf("Resolve without a note: %v, want an *idem.InputError on note", err)
		}
		if err := e.admin.Resolve(ctx, "o-1", strings.Repeat("x", MaxNoteLen+1)); !errors.As(err, &ie) {
			t.Fatalf("Resolve with a long note: %v, want an *idem.InputError", err)
		}
		for _, note := range []string{"refunded\x00", "refunded \xff"} { // no text column holds them (PostgreSQL, MariaDB)
			if err := e.admin.Resolve(ctx, "o-1", note); !errors.As(err, &ie) || ie.Field != "note" {
				t.Fatalf("Resolve with the note %q: %v, want an *idem.InputError on note", note, err)
			}
		}
		before := time.Now()
		if err := e.admin.Resolve(ctx, "o-1", "refunded by hand, ticket 42"); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if n, err := e.o.RunOnce(ctx); err != nil || n != 0 {
				t.Fatalf("RunOnce over a resolved saga: advanced %d, %v", n, err)
			}
		}
		if _, err := e.o.Start(ctx, "order", "o-2", nil); err != nil {
			t.Fatal(err)
		}
		e.run(t)
		e.waitFor(t, "o-2", Completed)
		if n := e.calls.count("reserve"); n != 1 {
			t.Fatalf("reserve called %d times, want once (o-2's): the resolved saga was advanced", n)
		}
		d, err := e.admin.Get(ctx, "o-1")
		if err != nil || d.State != Resolved || d.Resolution == nil {
			t.Fatalf("resolved saga: %+v, %v", d, err)
		}
		if r := d.Resolution; r.Note != "refunded by hand, ticket 42" || r.PreviousState != Running || r.At.Before(before.Add(-time.Second)) {
			t.Fatalf("resolution: %+v", r)
		}
		var se *StateError
		if err := e.admin.Resolve(ctx, "o-1", "again"); !errors.As(err, &se) || se.State != Resolved {
			t.Fatalf("Resolve twice: %v, want a *StateError", err)
		}
		if err := e.admin.RetryStep(ctx, "o-1", "again"); !errors.As(err, &se) || se.State != Resolved {
			t.Fatalf("RetryStep of a resolved saga: %v, want a *StateError", err)
		}
	})
}

// List visits every saga once, page by page, by state or all; an unknown id is
// ErrNotFound everywhere; bad input is an *idem.InputError.
func TestAdminListAndNotFound(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, env env) {
		ctx := context.Background()
		e := newAdminEnv(t, env.db)
		var all []string
		for i := range 7 {
			id := fmt.Sprint("o-", i)
			all = append(all, id)
			if _, err := e.o.Start(ctx, "order", id, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{"o-2", "o-5"} {
			if err := e.admin.Resolve(ctx, id, "test"); err != nil {
				t.Fatal(err)
			}
		}
		list := func(state string, limit int) []string {
			t.Helper()
			var got []string
			cur := ""
			for range 20 {
				p, err := e.admin.List(ctx, state, cur, limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(p.Sagas) > limit {
					t.Fatalf("page of %d, limit %d", len(p.Sagas), limit)
				}
				for _, s := range p.Sagas {
					if state != "" && s.State != state {
						t.Fatalf("List(%q) returned a %s saga", state, s.State)
					}
					got = append(got, s.ID)
				}
				if cur = p.Next; cur == "" {
					return got
				}
			}
			t.Fatal("more than 20 pages")
			return nil
		}
		for _, limit := range []int{1, 2, 3, 1000} {
			if got := list("", limit); !slices.Equal(got, all) {
				t.Fatalf("every saga, %d a page: %v, want %v", limit, got, all)
			}
		}
		if got := list(Running, 2); !slices.Equal(got, []string{"o-0", "o-1", "o-3", "o-4", "o-6"}) {
			t.Fatalf("running sagas: %v", got)
		}
		if got := list(Resolved, 1); !slices.Equal(got, []string{"o-2", "o-5"}) {
			t.Fatalf("resolved sagas: %v", got)
		}
		if got := list(Failed, 5); len(got) != 0 {
			t.Fatalf("failed sagas: %v", got)
		}
		for _, bad := range []struct {
			state, cursor string
			limit         int
		}{{"", "", 0}, {"", "", idem.MaxListLimit + 1}, {"stuck", "", 10}, {"", "not a cursor!", 10}} {
			var ie *idem.InputError
			if _, err := e.admin.List(ctx, bad.state, bad.cursor, bad.limit); !errors.As(err, &ie) {
				t.Errorf("List(%+v) = %v, want an *idem.InputError", bad, err)
			}
		}
		if _, err := e.admin.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of an unknown id: %v, want ErrNotFound", err)
		}
		if err := e.admin.RetryStep(ctx, "nope", "why"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("RetryStep of an unknown id: %v, want ErrNotFound", err)
		}
		if err := e.admin.Resolve(ctx, "nope", "why"); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("Resolve of an unknown id: %v, want idem.ErrNotFound", err)
		}
	})
}

// RetryStep while an orchestrator is inside the step fences that orchestrator out:
// its save fails with idem.ErrLeaseLost, the next round finishes the saga, and the
// step's call, recorded by the fence, is not made twice.
func TestAdminRetryFencesTheHolder(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, env env) {
		ctx := context.Background()
		entered, release := make(chan struct{}), make(chan struct{})
		var mu sync.Mutex
		charges := 0
		o, err := New(ctx, env.db, Config{}, Definition{Name: "order", Steps: []Step{
			{Name: "charge", NoCompensation: true, Action: func(context.Context, Input) ([]byte, error) {
				mu.Lock()
				charges++
				first := charges == 1
				mu.Unlock()
				if first {
					close(entered)
					<-release
				}
				return []byte("ch-1"), nil
			}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := NewAdmin(ctx, env.db)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Start(ctx, "order", "o-1", nil); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { _, err := o.RunOnce(ctx); errc <- err }()
		<-entered
		if err := a.RetryStep(ctx, "o-1", "looks stuck"); err != nil {
			t.Fatal(err)
		}
		close(release)
		if err := <-errc; !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("the fenced orchestrator's round: %v, want idem.ErrLeaseLost", err)
		}
		if _, err := o.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d, err := a.Get(ctx, "o-1")
		if err != nil || d.State != Completed || string(d.Results["charge"]) != "ch-1" {
			t.Fatalf("saga after the retry: %+v, %v", d, err)
		}
		if charges != 1 {
			t.Fatalf("charge called %d times, want once", charges)
		}
	})
}
