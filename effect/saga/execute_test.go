package saga

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Execute runs a new saga to its end on the caller's goroutine, each step once; run
// again for the same id (a retried request), it runs nothing and returns the saga;
// racing callers of one id run each step once between them; a failing step
// compensates as under Run.
func TestExecute(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		s := newServices(t)
		o := e.orchestrator(t, s, nil)
		inst, err := o.Execute(ctx, "order", "x-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if inst.State != Completed || inst.Step != len(stepNames) || string(inst.Results["ship"]) != "ship-ok" {
			t.Fatalf("Execute = %+v, want completed with results", inst)
		}
		again, err := o.Execute(ctx, "order", "x-1", nil)
		if err != nil || again.State != Completed {
			t.Fatalf("Execute again = %+v, %v", again, err)
		}
		if got, want := s.applied("x-1"), stepNames; !slices.Equal(got, want) {
			t.Fatalf("applied %v, want %v (each step once)", got, want)
		}

		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, err := o.Execute(ctx, "order", "x-race", nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if got := finish(t, e, o, "x-race"); got.State != Completed {
			t.Fatalf("raced saga %+v", got)
		}
		if got := s.applied("x-race"); !slices.Equal(got, stepNames) {
			t.Fatalf("raced Execute applied %v, want %v", got, stepNames)
		}

		failed, err := o.Execute(ctx, "order", "x-fail", []byte("fail:ship"))
		if err != nil {
			t.Fatal(err)
		}
		ops, state := expected(2)
		if failed.State != state || !strings.Contains(failed.Reason, "ship refused") {
			t.Fatalf("Execute of a failing saga = %+v, want %s", failed, state)
		}
		if got := s.applied("x-fail"); !slices.Equal(got, ops) {
			t.Fatalf("applied %v, want %v", got, ops)
		}

		if _, err := o.Execute(ctx, "nope", "x-2", nil); err == nil {
			t.Fatal("Execute of an undefined saga succeeded")
		}
	})
}

// A saga Execute leaves waiting (a step's transient failure) is finished by Run
// after its backoff, as any saga.
func TestExecuteLeavesTheRestToRun(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		s := newServices(t)
		s.mu.Lock()
		s.failNext = map[string]int{"charge": 1}
		s.mu.Unlock()
		o := e.orchestrator(t, s, nil)
		inst, err := o.Execute(ctx, "order", "y-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if inst.State != Running || inst.Step != 1 {
			t.Fatalf("Execute = %+v, want running at step 1 (charge failed once)", inst)
		}
		e.clock.Jump(2 * time.Second)
		if got := finish(t, e, o, "y-1"); got.State != Completed {
			t.Fatalf("saga %+v after Run", got)
		}
		if got := s.applied("y-1"); !slices.Equal(got, stepNames) {
			t.Fatalf("applied %v, want %v", got, stepNames)
		}
	})
}
