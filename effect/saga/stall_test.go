package saga

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/bits"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
)

// watched is an orchestrator with its metrics and logs.
type watched struct {
	*Orchestrator[*sql.Tx]
	reg  *prometheus.Registry
	logs *testsvc.Buffer
}

// logged returns how many times the orchestrator logged msg.
func (w watched) logged(msg string) int { return strings.Count(w.logs.String(), msg) }

func (e env) watched(t *testing.T, cfg Config, defs ...Definition) watched {
	t.Helper()
	w := watched{reg: prometheus.NewRegistry(), logs: &testsvc.Buffer{}}
	cfg.Registerer, cfg.Logger, cfg.Now = w.reg, slog.New(slog.NewTextHandler(w.logs, nil)), e.clock.Now
	cfg.Lease, cfg.Backoff = time.Minute, func(int) time.Duration { return time.Second }
	o, err := New(context.Background(), e.db, cfg, defs...)
	if err != nil {
		t.Fatal(err)
	}
	w.Orchestrator = o
	return w
}

// sagas returns idem_sagas_total{saga, outcome}.
func (w watched) sagas(t *testing.T, saga, outcome string) float64 {
	t.Helper()
	return idemtest.MetricSum(t, w.reg, "idem_sagas_total", map[string]string{"saga": saga, "outcome": outcome})
}

// rounds runs RunOnce, each round a backoff later, until done holds; a round that
// fails fails the test. It gives up after 30 rounds: every saga here ends in far
// fewer.
func (w watched) rounds(t *testing.T, e env, what string, done func() bool) {
	t.Helper()
	for round := 0; !done(); round++ {
		if round == 30 {
			t.Fatalf("after 30 rounds: not yet %s", what)
		}
		if _, err := w.RunOnce(context.Background()); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		e.clock.Jump(2 * time.Second) // past backoffs, not leases
	}
}

// ended reports whether every saga of ids has ended.
func (w watched) ended(t *testing.T, ids ...string) bool {
	t.Helper()
	for _, id := range ids {
		inst, ok, err := w.Get(context.Background(), id)
		if err != nil || !ok {
			t.Fatalf("Get(%s): %v, %v", id, ok, err)
		}
		if inst.State == Running || inst.State == Compensating {
			return false
		}
	}
	return true
}

func execSQL(t *testing.T, db idemsql.TxDB[*sql.Tx], query string, args ...any) {
	t.Helper()
	ctx := context.Background()
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := db.Querier(tx).Exec(ctx, query, args...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func startSagas(t *testing.T, o *Orchestrator[*sql.Tx], name, prefix string, n int, data string) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%02d", prefix, i)
		if _, err := o.Start(context.Background(), name, id, []byte(data)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// Sagas another team wrote by hand, whose rows cannot be decoded, are due before
// more good sagas than a round takes: every good saga completes, and each bad one
// is parked once, in its state, saying why, listed, counted and logged once.
// Corrected and retried, each goes on from its step. On SQLite, PostgreSQL and
// MariaDB.
func TestUndecodableSagasParked(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		s := newServices(t)
		w := e.watched(t, Config{}, orderSaga(s))
		bad := map[string]string{ // id → the start of its decode error
			"bad-json":   "results: not a JSON object of base64 strings",
			"bad-base64": "results: not a JSON object of base64 strings",
		}
		sqltest.Saga(t, e.db, "bad-json", Running, `not json`, 0)
		sqltest.Saga(t, e.db, "bad-base64", Compensating, `{"charge":42}`, 0)
		if e.db.Dialect() == idemsql.SQLite {
			sqltest.Saga(t, e.db, "bad-typed", Running, `{}`, "twice")
			bad["bad-typed"] = "attempts: "
		}
		good := startSagas(t, w.Orchestrator, "order", "good", pollBatch+8, "")
		w.rounds(t, e, "every good saga completed", func() bool { return w.ended(t, good...) })
		for _, id := range good {
			if inst, _, _ := w.Get(ctx, id); inst.State != Completed {
				t.Errorf("%s: %s, want completed", id, inst.State)
			}
		}
		e.clock.Jump(time.Hour)
		if _, err := w.RunOnce(ctx); err != nil { // nothing is due: the bad ones are parked
			t.Fatal(err)
		}

		a, err := NewAdmin(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		for id, decode := range bad {
			d, err := a.Get(ctx, id)
			want := map[string]string{"bad-json": Running, "bad-base64": Compensating, "bad-typed": Running}[id]
			if err != nil || d.State != want || !d.Parked || !d.NextAt.IsZero() || !strings.HasPrefix(d.DecodeError, decode) ||
				!strings.Contains(d.Reason, "written by hand; parked at ") || !strings.Contains(d.Reason, "its row cannot be decoded: "+decode) {
				t.Errorf("%s: %+v, %v; want it parked, %s, saying why", id, d, err, want)
			}
		}
		page, err := a.List(ctx, Parked, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, inst := range page.Sagas {
			listed = append(listed, inst.ID)
			if !inst.Parked {
				t.Errorf("List(parked): %s not marked parked", inst.ID)
			}
		}
		if want := slices.Sorted(maps.Keys(bad)); !slices.Equal(listed, want) {
			t.Errorf("List(parked) = %v, want %v", listed, want)
		}
		all, err := w.List(ctx, "", 200)
		if err != nil || len(all) != len(good)+len(bad) {
			t.Fatalf("Orchestrator.List = %d sagas, %v; want %d, the bad ones with their decode error", len(all), err, len(good)+len(bad))
		}
		if n := w.sagas(t, "order", "parked"); n != float64(len(bad)) {
			t.Errorf(`idem_sagas_total{outcome="parked"} = %v, want %d`, n, len(bad))
		}
		if n := w.logged("saga: parked"); n != len(bad) {
			t.Errorf("%d parking lines logged, want one per bad saga (%d):\n%s", n, len(bad), w.logs.String())
		}

		// The operator corrects the rows and retries: each goes on from its step.
		execSQL(t, e.db, `UPDATE idem_sagas SET results = '{}', attempts = 0 WHERE id LIKE 'bad-%'`)
		for id := range bad {
			if err := a.RetryStep(ctx, id, "results corrected"); err != nil {
				t.Fatalf("RetryStep(%s): %v", id, err)
			}
		}
		w.rounds(t, e, "every corrected saga ended", func() bool { return w.ended(t, slices.Collect(maps.Keys(bad))...) })
		for id, want := range map[string][]string{"bad-json": {"charge", "ship", "confirm"}, "bad-base64": {"refund", "release"}} {
			if got := s.applied(id); !slices.Equal(got, want) {
				t.Errorf("%s after its retry: applied %v, want %v", id, got, want)
			}
		}
	})
}

// A saga whose step is not one of its definition's (forward or backward) is
// parked, saying so; the sagas behind it complete.
func TestSagaOfUnknownStepParked(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		w := e.watched(t, Config{}, orderSaga(newServices(t)))
		sqltest.Saga(t, e.db, "step-9", Running, `{}`, 0)
		sqltest.Saga(t, e.db, "undo-4", Compensating, `{}`, 0)
		execSQL(t, e.db, `UPDATE idem_sagas SET step = 9 WHERE id = 'step-9'`)
		execSQL(t, e.db, `UPDATE idem_sagas SET step = 4 WHERE id = 'undo-4'`)
		good := startSagas(t, w.Orchestrator, "order", "good", 3, "")
		w.rounds(t, e, "every good saga completed", func() bool { return w.ended(t, good...) })
		for id, step := range map[string]int{"step-9": 9, "undo-4": 4} {
			inst, _, err := w.Get(ctx, id)
			if err != nil || !inst.Parked || !strings.Contains(inst.Reason, fmt.Sprintf(`its step %d is not one of saga "order", whose steps are 0 to 3`, step)) {
				t.Errorf("%s: %+v, %v; want it parked, saying its step is unknown", id, inst, err)
			}
		}
	})
}

// A saga of a name this orchestrator does not define (another version's, or a
// row written with a wrong name) is left alone for one that does: never leased,
// never failing a round.
func TestSagaOfUnknownNameLeftAlone(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		w := e.watched(t, Config{}, orderSaga(newServices(t)))
		sqltest.Saga(t, e.db, "other-1", Running, `{}`, 0)
		execSQL(t, e.db, `UPDATE idem_sagas SET saga = 'invoice' WHERE id = 'other-1'`)
		good := startSagas(t, w.Orchestrator, "order", "good", 3, "")
		w.rounds(t, e, "every good saga completed", func() bool { return w.ended(t, good...) })
		var until, token int64
		ctx := context.Background()
		if err := e.db.InTx(ctx, func(tx *sql.Tx) error {
			return e.db.Querier(tx).QueryRow(ctx, `SELECT lease_until, token FROM idem_sagas WHERE id = 'other-1'`).Scan(&until, &token)
		}); err != nil {
			t.Fatal(err)
		}
		if until != 0 || token != 1 {
			t.Errorf("the invoice saga was leased (lease_until %d, token %d) by an orchestrator that cannot run it", until, token)
		}
	})
}

// A round that fails (the database is unreachable) is logged once, and the rounds
// that fail after it are collapsed into a few lines; the first round that works
// again says so.
func TestRunCollapsesFailedRounds(t *testing.T) {
	t.Parallel()
	e := env{sqltest.SQLite(t), &chaos.Clock{}}
	var down atomic.Bool
	var failures atomic.Int64
	begin := e.db.Begin
	e.db.Begin = func(ctx context.Context) (*sql.Tx, error) {
		if down.Load() {
			failures.Add(1)
			return nil, errors.New("connection refused")
		}
		return begin(ctx)
	}
	w := e.watched(t, Config{PollInterval: time.Millisecond}, flaky())
	down.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testsvc.Eventually(t, time.Minute, "40 failed rounds", func() bool { return failures.Load() >= 40 })
	// A round counts its failure before it logs: lines first, then failures.
	lines := w.logged("saga: round failed")
	n := int(failures.Load())
	if lines > bits.Len(uint(n)) {
		t.Errorf("%d rounds failed, %d lines logged; want at most %d", n, lines, bits.Len(uint(n)))
	}
	down.Store(false)
	testsvc.Eventually(t, time.Minute, "the rounds working again", func() bool { return w.logged("saga: rounds succeed again") == 1 })
	cancel()
	<-done
}
