package saga

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
)

// services stands for the stock, payment and shipping services: one HTTP server
// behind idem's Idempotency-Key middleware (a key applies once), logging the ops
// it executed per saga, in order. Steps call it through idemhttp.Transport with no
// key of their own: the Transport derives it from the step's key lineage in the
// context, so a step re-run after a crash sends the same key.
type services struct {
	srv    *httptest.Server
	client *http.Client
	mu     sync.Mutex
	log    map[string][]string // saga id → ops executed, in order
	// failNext makes the next n calls of an op fail with a transient error, before
	// the service is called.
	failNext map[string]int
	// requests counts the requests per saga id and op, before the middleware
	// deduplicates them.
	requests map[[2]string]int
	// keyed makes orderSaga's actions Keyed.
	keyed bool
}

func newServices(t *testing.T) *services {
	s := &services{log: map[string][]string{}, requests: map[[2]string]int{},
		client: &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 1}}}
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, RequireKey: true})
	if err != nil {
		t.Fatal(err)
	}
	apply := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		id := r.URL.Query().Get("saga")
		s.log[id] = append(s.log[id], strings.TrimPrefix(r.URL.Path, "/"))
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests[[2]string{r.URL.Query().Get("saga"), strings.TrimPrefix(r.URL.Path, "/")}]++
		s.mu.Unlock()
		apply.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *services) apply(ctx context.Context, in Input, op string) error {
	s.mu.Lock()
	if s.failNext[op] > 0 {
		s.failNext[op]--
		s.mu.Unlock()
		return errors.New(op + ": service unavailable")
	}
	s.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL+"/"+op+"?saga="+in.SagaID, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("%s: %s", op, resp.Status)
	}
	return nil
}

// requested is how many requests for op saga id sent, the repeated ones included.
func (s *services) requested(id, op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[[2]string{id, op}]
}

func (s *services) applied(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log[id])
}

var stepNames = []string{"reserve", "charge", "ship", "confirm"}
var undoNames = map[string]string{"reserve": "release", "charge": "refund", "ship": "cancel"}

// orderSaga is reserve stock → charge → ship → confirm. A saga whose data is
// "fail:<step>" has that step refused permanently.
func orderSaga(s *services) Definition {
	var steps []Step
	for _, name := range stepNames {
		step := Step{
			Name:  name,
			Keyed: s.keyed,
			Action: func(ctx context.Context, in Input) ([]byte, error) {
				if string(in.Data) == "fail:"+name {
					return nil, effect.Permanent(errors.New(name + " refused"))
				}
				return []byte(name + "-ok"), s.apply(ctx, in, name)
			},
		}
		if undo, ok := undoNames[name]; ok {
			step.Compensate = func(ctx context.Context, in Input) error { return s.apply(ctx, in, undo) }
		} else {
			step.NoCompensation = true
		}
		steps = append(steps, step)
	}
	return Definition{Name: "order", Steps: steps}
}

type env struct {
	db    idemsql.TxDB[*sql.Tx]
	clock *chaos.Clock
}

func forEachDB(t *testing.T, fn func(t *testing.T, e env)) {
	sqltest.ForEachDialect(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		fn(t, env{db, &chaos.Clock{}})
	})
}

func (e env) orchestrator(t *testing.T, s *services, crash func(string)) *Orchestrator[*sql.Tx] {
	t.Helper()
	o, err := New(context.Background(), e.db, Config{Lease: time.Minute, Now: e.clock.Now, crash: crash,
		Backoff: func(int) time.Duration { return time.Second }}, orderSaga(s))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// finish advances every saga to its end, moving the clock past backoffs and the
// leases of crashed orchestrators.
func finish(t *testing.T, e env, o *Orchestrator[*sql.Tx], id string) Instance {
	t.Helper()
	for range 50 {
		if _, err := o.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		inst, ok, err := o.Get(context.Background(), id)
		if err != nil || !ok {
			t.Fatalf("Get(%s): %v, %v", id, ok, err)
		}
		if inst.State != Running && inst.State != Compensating {
			return inst
		}
		e.clock.Jump(2 * time.Minute)
	}
	t.Fatalf("saga %s did not finish", id)
	return Instance{}
}

// expected is what the services must have applied, in order, for a saga that
// fails at step k (len(stepNames) for none).
func expected(k int) (ops []string, state string) {
	for i := range k {
		ops = append(ops, stepNames[i])
	}
	if k == len(stepNames) {
		return ops, Completed
	}
	for i := k - 1; i >= 0; i-- {
		if undo, ok := undoNames[stepNames[i]]; ok {
			ops = append(ops, undo)
		}
	}
	return ops, Compensated
}

func TestFailAtEachStep(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		s := newServices(t)
		o := e.orchestrator(t, s, nil)
		for k := 0; k <= len(stepNames); k++ {
			id, data := fmt.Sprintf("ok-%d", k), ""
			if k < len(stepNames) {
				id, data = "fail-at-"+stepNames[k], "fail:"+stepNames[k]
			}
			if created, err := o.Start(context.Background(), "order", id, []byte(data)); err != nil || !created {
				t.Fatalf("Start(%s): %v, %v", id, created, err)
			}
			if again, err := o.Start(context.Background(), "order", id, []byte(data)); err != nil || again {
				t.Fatalf("second Start(%s) created a saga: %v, %v", id, again, err)
			}
			inst := finish(t, e, o, id)
			ops, state := expected(k)
			if inst.State != state || !slices.Equal(s.applied(id), ops) {
				t.Errorf("%s: state %s, applied %v; want %s, %v", id, inst.State, s.applied(id), state, ops)
			}
			if state == Compensated && !strings.Contains(inst.Reason, stepNames[k]+" refused") {
				t.Errorf("%s: reason %q does not say which step failed", id, inst.Reason)
			}
		}
		if all, err := o.List(context.Background(), Compensated, 10); err != nil || len(all) != len(stepNames) {
			t.Fatalf("List(compensated) = %d sagas, %v; want %d", len(all), err, len(stepNames))
		}
	})
}

// crashPoints are the crash hooks' points at every boundary of every step, forward
// (before:, inside:do:, after:) and, for steps with a compensation, backward.
func crashPoints() []string {
	var points []string
	for _, n := range stepNames {
		points = append(points, "before:"+n, "inside:do:"+n, "after:"+n)
		if _, ok := undoNames[n]; ok {
			points = append(points, "before-undo:"+n, "inside:undo:"+n, "after-undo:"+n)
		}
	}
	return points
}

// Crash the orchestrator at every boundary of every step, forward and backward
// (inside: after the service applied the step, before the fence records it): a
// new orchestrator resumes the saga, and every action and compensation is applied
// exactly once.
func TestCrashAtEachBoundary(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		for _, point := range crashPoints() {
			crashAndResume(t, e, newServices(t), "crash-", point)
		}
	})
}

// crashAndResume runs a saga (id prefix+point) on s with an orchestrator that crashes
// once at point, then resumes it with a new orchestrator once the crashed one's
// leases expired, and checks the saga's end state and that every action and
// compensation was applied once. It returns the saga's id and how many steps ran
// forward (all of them, or all but the last for a saga that fails at confirm to
// crash while compensating).
func crashAndResume(t *testing.T, e env, s *services, prefix, point string) (id string, k int) {
	t.Helper()
	// Sagas that turn around at confirm compensate every step: both directions get
	// crashed in.
	fails := strings.Contains(point, "undo")
	id, data, k := prefix+point, "", len(stepNames)
	if fails {
		data, k = "fail:confirm", len(stepNames)-1
	}
	crashed := false
	hook := func(p string) {
		if p == point && !crashed {
			crashed = true
			panic("crash")
		}
	}
	first := e.orchestrator(t, s, hook)
	if _, err := first.Start(context.Background(), "order", id, []byte(data)); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		for range 10 {
			if _, err := first.RunOnce(context.Background()); err != nil {
				t.Errorf("%s: %v", point, err)
				return
			}
			e.clock.Jump(2 * time.Second) // backoffs pass, leases do not
		}
	}()
	if !crashed {
		t.Fatalf("%s: the crash point was never reached", point)
	}
	e.clock.Jump(2 * time.Minute) // the crashed orchestrator's leases expire
	inst := finish(t, e, e.orchestrator(t, s, nil), id)
	ops, state := expected(k)
	if inst.State != state || !slices.Equal(s.applied(id), ops) {
		t.Errorf("crash at %s: state %s, applied %v; want %s, %v", point, inst.State, s.applied(id), state, ops)
	}
	return id, k
}

func TestBadDefinitions(t *testing.T) {
	t.Parallel()
	db := sqltest.SQLite(t)
	act := func(context.Context, Input) ([]byte, error) { return nil, nil }
	for _, tc := range []struct {
		def   Definition
		field string
	}{
		{Definition{Steps: []Step{{Name: "a", Action: act, NoCompensation: true}}}, "Definition.Name"},
		{Definition{Name: "x"}, "Definition.Steps"},
		{Definition{Name: "x", Steps: []Step{{Name: "a", Action: act}}}, `Definition "x" Steps[0].Compensate`},
		{Definition{Name: "x", Steps: []Step{{Name: "a", NoCompensation: true}}}, `Definition "x" Steps[0].Action`},
		{Definition{Name: "x", Steps: []Step{{Name: "a", Action: act, NoCompensation: true, Timeout: -time.Second}}}, `Definition "x" Steps[0].Timeout`},
	} {
		_, err := New(context.Background(), db, Config{}, tc.def)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("New(%+v): %v, want an InputError on %s", tc.def, err, tc.field)
		}
	}
}

// A negative duration is refused by name, as effect.New refuses it; zero means the
// default.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	db := sqltest.SQLite(t)
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Lease: -time.Second}, "Config.Lease"},
		{Config{PollInterval: -time.Second}, "Config.PollInterval"},
	} {
		_, err := New(context.Background(), db, tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("New(%+v): %v, want an InputError on %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := New(context.Background(), db, Config{}); err != nil {
		t.Fatalf("New with zero durations (the defaults): %v", err)
	}
}
