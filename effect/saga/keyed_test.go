package saga

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem/internal/group"
)

// keyedServices are services whose orderSaga actions are Keyed.
func keyedServices(t *testing.T) *services {
	s := newServices(t)
	s.keyed = true
	return s
}

// Keyed actions, crashed at every boundary of every step forward and backward: a
// crash between an action's call and the saga's write (inside, after) calls it
// again with the same key, which the services' middleware answers without
// applying it twice; a step recorded before the crash is not called again; the
// compensations, fenced, run once each. No action leaves an effect row.
func TestKeyedCrashAtEachBoundary(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		for _, point := range crashPoints() {
			s := keyedServices(t)
			id, k := crashAndResume(t, e, s, "keyed-crash-", point)
			for _, op := range stepNames[:k] {
				want := 1
				if point == "inside:do:"+op || point == "after:"+op {
					want = 2 // unrecorded when it crashed: called again, with the same key
				}
				if got := s.requested(id, op); got != want {
					t.Errorf("crash at %s: %s requested %d times, want %d", point, op, got, want)
				}
			}
			checkNoActionEffects(t, e, id)
		}
	})
}

// A saga of Keyed actions that fails at each step compensates the steps before it,
// in reverse, each once, with the failure's reason, as a fenced one does; Execute
// of a finished saga calls nothing again.
func TestKeyedFailAtEachStep(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		s := keyedServices(t)
		o := e.orchestrator(t, s, nil)
		for k := 0; k <= len(stepNames); k++ {
			id, data := fmt.Sprint("keyed-ok-", k), ""
			if k < len(stepNames) {
				id, data = "keyed-fail-at-"+stepNames[k], "fail:"+stepNames[k]
			}
			inst, err := o.Execute(ctx, "order", id, []byte(data))
			if err != nil {
				t.Fatal(err)
			}
			ops, state := expected(k)
			if inst.State != state || !slices.Equal(s.applied(id), ops) {
				t.Errorf("%s: state %s, applied %v; want %s, %v", id, inst.State, s.applied(id), state, ops)
			}
			if state == Compensated && !strings.Contains(inst.Reason, stepNames[k]+" refused") {
				t.Errorf("%s: reason %q does not say which step failed", id, inst.Reason)
			}
			if state == Completed && string(inst.Results["ship"]) != "ship-ok" {
				t.Errorf("%s: results %q, want each step's", id, inst.Results)
			}
			again, err := o.Execute(ctx, "order", id, []byte(data))
			if err != nil || again.State != state {
				t.Fatalf("Execute(%s) again = %+v, %v", id, again, err)
			}
			for _, op := range ops {
				if got := s.requested(id, op); got != 1 {
					t.Errorf("%s: %s requested %d times, want once (a recorded step is not called again)", id, op, got)
				}
			}
			checkNoActionEffects(t, e, id)
		}
	})
}

// A Keyed action's transient failures are retried after their backoff with the same
// key, and turn the saga around after MaxAttempts, as a fenced action's.
func TestKeyedTransientFailures(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		s := keyedServices(t)
		s.mu.Lock()
		s.failNext = map[string]int{"charge": 2}
		s.mu.Unlock()
		o := e.orchestrator(t, s, nil)
		inst, err := o.Execute(context.Background(), "order", "keyed-retry", nil)
		if err != nil {
			t.Fatal(err)
		}
		if inst.State != Running || inst.Step != 1 || inst.Attempts != 1 {
			t.Fatalf("Execute = %+v, want running at step 1 after one failed attempt", inst)
		}
		if got := finish(t, e, o, "keyed-retry"); got.State != Completed {
			t.Fatalf("saga %+v after Run", got)
		}
		if got := s.applied("keyed-retry"); !slices.Equal(got, stepNames) {
			t.Fatalf("applied %v, want %v", got, stepNames)
		}
	})
}

// checkNoActionEffects fails t if saga id's actions left effect rows: a Keyed
// action is recorded in the saga's row alone.
func checkNoActionEffects(t *testing.T, e env, id string) {
	t.Helper()
	a, err := NewAdmin(context.Background(), e.db)
	if err != nil {
		t.Fatal(err)
	}
	d, err := a.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, ef := range d.Effects {
		if strings.HasPrefix(ef.Step, "do:") {
			t.Errorf("saga %s: keyed action left the effect %s (%s)", id, ef.Step, ef.State)
		}
	}
}

// A batch of saves (GroupSave, on PostgreSQL) writes each saga under its own token
// only: the saga whose token is stale is not written, and its caller learns it, as
// with Save alone; concurrent Executes, whose saves share batches, each run their
// saga to its end once.
func TestGroupSave(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		s := keyedServices(t)
		o := e.orchestrator(t, s, nil)
		if o.saves == nil {
			t.Skip("no GroupSave on this database")
		}
		for _, id := range []string{"gs-a", "gs-b"} {
			if _, err := o.Start(ctx, "order", id, nil); err != nil {
				t.Fatal(err)
			}
		}
		a, tokenA, ok, err := o.lease(ctx, "gs-a")
		if err != nil || !ok {
			t.Fatalf("lease: %v, %v", ok, err)
		}
		now := e.clock.Now().UnixNano()
		good := group.NewItem(ctx, saveCall{state: Running, step: 1, results: `{"reserve":"eA=="}`, now: now, id: a.ID, token: tokenA})
		stale := group.NewItem(ctx, saveCall{state: Running, step: 1, results: `{}`, now: now, id: "gs-b", token: 7})
		o.saveBatch([]*group.Item[saveCall]{stale, good})
		if good.Wait() != nil || stale.Wait() != nil || !good.Val.saved || stale.Val.saved {
			t.Fatalf("batch: good %v %v, stale %v %v; want good saved, stale not", good.Val.saved, good.Err, stale.Val.saved, stale.Err)
		}
		if got, _, _ := o.Get(ctx, "gs-a"); got.Step != 1 || string(got.Results["reserve"]) != "x" {
			t.Fatalf("gs-a after the batch: %+v", got)
		}
		if got, _, _ := o.Get(ctx, "gs-b"); got.Step != 0 {
			t.Fatalf("gs-b written under a stale token: %+v", got)
		}

		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				inst, err := o.Execute(ctx, "order", fmt.Sprint("gs-many-", i), nil)
				if err != nil || inst.State != Completed {
					t.Errorf("Execute: %+v, %v", inst, err)
				}
			})
		}
		wg.Wait()
		for i := range 16 {
			if got := s.applied(fmt.Sprint("gs-many-", i)); !slices.Equal(got, stepNames) {
				t.Errorf("gs-many-%d applied %v, want %v", i, got, stepNames)
			}
		}
	})
}
