package saga

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
)

// BenchmarkSagaSteps runs 4-step sagas on Postgres to completion: steps/s is
// b.N*4 over the time. The steps themselves do nothing, so the figure is the
// orchestrator's and the fence's own cost (two fence transactions and one state
// save per step, one lease per saga).
func BenchmarkSagaSteps(b *testing.B) {
	db := sqltest.Postgres(b)
	noop := func(context.Context, Input) ([]byte, error) { return []byte("ok"), nil }
	undo := func(context.Context, Input) error { return nil }
	var steps []Step
	for i := range 4 {
		steps = append(steps, Step{Name: fmt.Sprint("s", i), Action: noop, Compensate: undo})
	}
	o, err := New(context.Background(), db, Config{}, Definition{Name: "bench", Steps: steps})
	if err != nil {
		b.Fatal(err)
	}
	prefix := testsvc.UniqueName("saga")
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := o.Start(context.Background(), "bench", id, nil); err != nil {
			b.Fatal(err)
		}
		if ok, err := o.advance(context.Background(), id); err != nil || !ok {
			b.Fatalf("advance: %v, %v", ok, err)
		}
	}
	b.ReportMetric(float64(4*b.N)/b.Elapsed().Seconds(), "steps/s")
}

// BenchmarkSagaStepsConcurrent is BenchmarkSagaSteps with 16 sagas advancing at
// once, each by its own caller: steps/s of an orchestrator under load.
func BenchmarkSagaStepsConcurrent(b *testing.B) {
	o := benchOrchestrator(b)
	prefix := testsvc.UniqueName("saga")
	testsvc.RunClients(b, 16, func(ctx context.Context, id string) error {
		id = prefix + "-" + id
		if _, err := o.Start(ctx, "bench", id, nil); err != nil {
			return err
		}
		if ok, err := o.advance(ctx, id); err != nil || !ok {
			return fmt.Errorf("advance %s: %v, %v", id, ok, err)
		}
		return nil
	})
	b.ReportMetric(float64(4*b.N)/b.Elapsed().Seconds(), "steps/s")
}

// BenchmarkSagaExecute: 4-step sagas started and run by Execute (one statement
// creates the saga leased, no poll), one at a time and 16 at once.
func BenchmarkSagaExecute(b *testing.B) {
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			o := benchOrchestrator(b)
			prefix := testsvc.UniqueName("saga")
			testsvc.RunClients(b, clients, func(ctx context.Context, id string) error {
				inst, err := o.Execute(ctx, "bench", prefix+"-"+id, nil)
				if err == nil && inst.State != Completed {
					err = fmt.Errorf("saga %s %s", inst.ID, inst.State)
				}
				return err
			})
			b.ReportMetric(float64(4*b.N)/b.Elapsed().Seconds(), "steps/s")
		})
	}
}

// benchOrchestrator is an orchestrator of saga "bench" (4 steps that do nothing)
// on a fresh Postgres schema whose handle keeps 32 idle connections (database/sql
// keeps 2 by default), for concurrent callers.
func benchOrchestrator(b *testing.B) *Orchestrator[*sql.Tx] {
	sdb := testsvc.PostgresDB(b)
	sdb.SetMaxIdleConns(32)
	db, err := idemsql.SQLDB(context.Background(), sdb)
	if err != nil {
		b.Fatal(err)
	}
	noop := func(context.Context, Input) ([]byte, error) { return []byte("ok"), nil }
	undo := func(context.Context, Input) error { return nil }
	var steps []Step
	for i := range 4 {
		steps = append(steps, Step{Name: fmt.Sprint("s", i), Action: noop, Compensate: undo})
	}
	o, err := New(context.Background(), db, Config{}, Definition{Name: "bench", Steps: steps})
	if err != nil {
		b.Fatal(err)
	}
	return o
}
