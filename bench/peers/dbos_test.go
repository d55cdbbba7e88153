package peers_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
)

// BenchmarkDBOS: durable external calls on the same Postgres in one run, DBOS
// Transact Go (workflows of RunAsStep steps, its defaults) beside idem's effect.Fence
// and effect/saga. Every step is one POST to the same local HTTP server; a flow is
// one workflow (DBOS) or one fenced call or saga (idem), run to completion by one of
// `flows` goroutines. Each sub-benchmark gets a fresh database (created and dropped
// here) and a pgx pool of flowPool connections, and reports:
//
//   - flows/s and steps/s: b.N flows (b.N*steps steps) over the time;
//   - x-dbos (idem rows only): idem's steps/s over the mean of DBOS's runs of the
//     same workload before it, in the same process;
//   - commits/step: pg_stat_database.xact_commit of the database over the run, per
//     step (every autocommit statement is a commit, reads included);
//   - txs/step, rollbacks/step, stmts/step: what the pool sent, counted by a pgx
//     tracer: transactions committed, ROLLBACKs, and statements other than
//     BEGIN/COMMIT/ROLLBACK (pg_stat_statements is not installed on the test server);
//   - load1: the machine's load average when the run ended.
//
// After each run the HTTP server must have seen every step's key exactly once, and
// the database must hold b.N completed flows.
//
// The 4-step rows run idem's saga twice: idem-saga with the default fenced steps
// (a PENDING row before each call, COMPLETE after it, then the saga's own write),
// which hold even for a downstream that honours no keys; and idem-saga-keyed with
// saga.Step.Keyed (the step's result recorded once, after the call, in the saga's
// row). The fair comparison with DBOS is the keyed one: a DBOS step is also
// recorded only after its call, so a crash between the two calls again, and is
// applied once only by a downstream that deduplicates by the key, as this
// server's does.
//
//	go test -run '^$' -bench DBOS -benchtime 2000x -count 3
func BenchmarkDBOS(b *testing.B) {
	for _, flows := range []int{1, 16} {
		b.Run(fmt.Sprintf("one-step/flows=%d/dbos", flows), func(b *testing.B) { benchDBOSFlows(b, flows, 1) })
		b.Run(fmt.Sprintf("one-step/flows=%d/idem-fence", flows), func(b *testing.B) { benchFenceFlows(b, flows, 1) })
	}
	for _, flows := range []int{1, 16} {
		b.Run(fmt.Sprintf("4-step/flows=%d/dbos", flows), func(b *testing.B) { benchDBOSFlows(b, flows, 4) })
		b.Run(fmt.Sprintf("4-step/flows=%d/idem-saga", flows), func(b *testing.B) { benchSagaFlows(b, flows, false) })
		b.Run(fmt.Sprintf("4-step/flows=%d/idem-saga-keyed", flows), func(b *testing.B) { benchSagaFlows(b, flows, true) })
		b.Run(fmt.Sprintf("4-step/flows=%d/idem-fence-x4", flows), func(b *testing.B) { benchFenceFlows(b, flows, 4) })
	}
}

// flowPool is the pool size of both sides: DBOS's default (the pool it opens from a
// DatabaseURL without pool_max_conns), given to idem too.
const flowPool = 20

// dbosFigures holds the DBOS steps/s measured so far for each workload
// ("one-step/flows=1"), for the x-dbos ratio of the idem rows that run after them:
// with -count, Go runs a sub-benchmark's repetitions one after the other, so the
// ratio is over the mean of the DBOS runs before it.
var dbosFigures = struct {
	sync.Mutex
	runs map[string][]float64
}{runs: map[string][]float64{}}

// workload splits a sub-benchmark's name into its workload ("one-step/flows=1")
// and the side that runs it ("dbos", "idem-fence").
func workload(b *testing.B) (name, side string) {
	name = strings.TrimPrefix(b.Name(), "BenchmarkDBOS/")
	i := strings.LastIndex(name, "/")
	return name[:i], name[i+1:]
}

// stepServer is the external service: it answers every POST at once and counts the
// calls per Idempotency-Key.
type stepServer struct {
	srv    *httptest.Server
	client *http.Client
	mu     sync.Mutex
	calls  map[string]int
}

func newStepServer(b *testing.B) *stepServer {
	s := &stepServer{calls: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.calls[r.Header.Get("Idempotency-Key")]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	}))
	b.Cleanup(s.srv.Close)
	s.client = s.srv.Client()
	s.client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	return s
}

// call POSTs to the server with key as its Idempotency-Key.
func (s *stepServer) call(ctx context.Context, key string) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL, strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", key)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("step server: %s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// check fails b unless the server saw want distinct keys, each once.
func (s *stepServer) check(b *testing.B, want int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) != want {
		b.Errorf("step server saw %d distinct keys, want %d (one per step per flow)", len(s.calls), want)
	}
	for k, n := range s.calls {
		if n != 1 {
			b.Errorf("key %q called %d times, want once", k, n)
			return
		}
	}
}

// sqlCounter is a pgx tracer counting what a pool sends: statements apart from
// transaction control, transactions committed (COMMITs, and statements or batches
// sent outside a transaction, each its own transaction) and ROLLBACKs.
type sqlCounter struct{ stmts, txs, rollbacks atomic.Int64 }

func (c *sqlCounter) count(conn *pgx.Conn, sql string) {
	word := strings.ToLower(strings.TrimSpace(sql))
	if i := strings.IndexAny(word, " \t\n;"); i >= 0 {
		word = word[:i]
	}
	switch word {
	case "begin", "start":
		return
	case "commit", "end":
		c.txs.Add(1)
		return
	case "rollback":
		c.rollbacks.Add(1)
		return
	}
	c.stmts.Add(1)
	if conn.PgConn().TxStatus() == 'I' {
		c.txs.Add(1)
	}
}

func (c *sqlCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(conn, d.SQL)
	return ctx
}

func (c *sqlCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *sqlCounter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if conn.PgConn().TxStatus() == 'I' {
		c.txs.Add(1) // an implicit transaction
	}
	return ctx
}

func (c *sqlCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, _ pgx.TraceBatchQueryData) {
	c.stmts.Add(1)
}

func (c *sqlCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *sqlCounter) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.stmts.Add(1)
	if conn.PgConn().TxStatus() == 'I' {
		c.txs.Add(1)
	}
	return ctx
}

func (c *sqlCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// flowDB is a fresh database of one sub-benchmark and a counted pool on it.
type flowDB struct {
	url, name string
	pool      *pgxpool.Pool
	sent      *sqlCounter
	commits0  int64 // xact_commit at the start of the timed run; -1: not measured
}

func newFlowDB(b *testing.B) *flowDB {
	raw := testsvc.PostgresDatabase(b)
	u, err := url.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = flowPool
	d := &flowDB{url: raw, name: strings.TrimPrefix(u.Path, "/"), sent: &sqlCounter{}}
	cfg.ConnConfig.Tracer = d.sent
	d.pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.pool.Close)
	return d
}

// connect opens a connection to url, retrying a few times: the server's
// connection slots are shared with whatever else runs on the machine.
func connect(b *testing.B, url string) *pgx.Conn {
	b.Helper()
	var err error
	for range 20 {
		var conn *pgx.Conn
		if conn, err = pgx.Connect(context.Background(), url); err == nil {
			return conn
		}
		time.Sleep(500 * time.Millisecond)
	}
	b.Fatal(err)
	return nil
}

// commits reads the database's committed transactions (pg_stat_database) once its
// statistics hold every backend's. A backend flushes its counts when it exits, and
// while it lives at most every second, or within 10 s of going idle
// (PGSTAT_MIN_INTERVAL, PGSTAT_IDLE_INTERVAL): with backends left, wait 11 s, so
// what is not yet counted is at most the last second of their work.
func (d *flowDB) commits(b *testing.B) int64 {
	ctx := context.Background()
	conn := connect(b, testsvc.PostgresURL())
	defer conn.Close(ctx)
	var n, backends int64
	read := func() {
		if err := conn.QueryRow(ctx, `SELECT xact_commit, (SELECT count(*) FROM pg_stat_activity WHERE datname = $1)
			FROM pg_stat_database WHERE datname = $1`, d.name).Scan(&n, &backends); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // closed connections' backends exit
	read()
	if backends > 0 {
		time.Sleep(11 * time.Second)
		read()
		return n
	}
	for last := int64(-1); n != last; {
		last = n
		time.Sleep(300 * time.Millisecond)
		read()
	}
	return n
}

// begin closes the setup's idle connections, records the baseline and leaves the
// timer to runFlows. The probe run of b.N = 1, whose figures go nowhere, skips
// the server's statistics and their wait.
func (d *flowDB) begin(b *testing.B) {
	d.commits0 = -1
	if b.N > 1 {
		d.pool.Reset()
		d.commits0 = d.commits(b)
	}
	d.sent.stmts.Store(0)
	d.sent.txs.Store(0)
	d.sent.rollbacks.Store(0)
}

// report stops the timer and reports the rates and write amplification of b.N
// flows of steps steps each; closeAll ends whatever still writes to the database
// and closes the pool.
func (d *flowDB) report(b *testing.B, steps int, closeAll func()) {
	b.StopTimer()
	secs := b.Elapsed().Seconds()
	stmts, txs, rollbacks := d.sent.stmts.Load(), d.sent.txs.Load(), d.sent.rollbacks.Load()
	closeAll()
	total := float64(b.N * steps)
	b.ReportMetric(float64(b.N)/secs, "flows/s")
	b.ReportMetric(total/secs, "steps/s")
	b.ReportMetric(float64(stmts)/total, "stmts/step")
	b.ReportMetric(float64(txs)/total, "txs/step")
	b.ReportMetric(float64(rollbacks)/total, "rollbacks/step")
	if d.commits0 >= 0 {
		b.ReportMetric(float64(d.commits(b)-d.commits0)/total, "commits/step")
	}
	b.ReportMetric(load1(), "load1")
	w, side := workload(b)
	dbosFigures.Lock()
	defer dbosFigures.Unlock()
	if side == "dbos" {
		if b.N > 1 {
			dbosFigures.runs[w] = append(dbosFigures.runs[w], total/secs)
		}
	} else if runs := dbosFigures.runs[w]; len(runs) > 0 {
		var sum float64
		for _, r := range runs {
			sum += r
		}
		b.ReportMetric(total/secs/(sum/float64(len(runs))), "x-dbos")
	}
}

// checkCount fails b unless query counts want.
func (d *flowDB) checkCount(b *testing.B, query string, want int) {
	b.Helper()
	ctx := context.Background()
	conn := connect(b, d.url)
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
		b.Fatal(err)
	}
	if n != want {
		b.Errorf("%s: %d, want %d", query, n, want)
	}
}

// load1 is the machine's one-minute load average at the end of the run (0 where
// /proc/loadavg is not there): figures on a shared machine are read beside it.
func load1() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	_, _ = fmt.Sscan(string(raw), &l)
	return l
}

// runFlows runs b.N flows from exactly flows goroutines, each flow with a fresh id,
// and fails b on the first error.
func runFlows(b *testing.B, flows int, prefix string, flow func(ctx context.Context, id string) error) {
	ctx := context.Background()
	var seq atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range flows {
		wg.Go(func() {
			for {
				i := seq.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := flow(ctx, fmt.Sprintf("%s-%d", prefix, i)); err != nil {
					b.Error(err)
					seq.Store(int64(b.N)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
}

// quietLogger logs warnings and errors only; DBOS gets a discarding one instead, as
// its Shutdown logs the cancellation of its own background polls as errors (the
// benchmark checks every flow's outcome itself).
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// benchDBOSFlows runs workflows of steps RunAsStep steps, each POSTing with the key
// "<workflow id>/<step>", started with RunWorkflow and awaited with GetResult.
func benchDBOSFlows(b *testing.B, flows, steps int) {
	ctx := context.Background()
	srv := newStepServer(b)
	db := newFlowDB(b)
	dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "idem-bench", SystemDBPool: db.pool, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			if err := dbos.Shutdown(dctx, 30*time.Second); err != nil {
				b.Error(err)
			}
		})
	}
	b.Cleanup(shutdown)
	wf := func(wctx dbos.Context, id string) (int, error) {
		for s := range steps {
			_, err := dbos.RunAsStep(wctx, func(sctx context.Context) ([]byte, error) {
				return srv.call(sctx, fmt.Sprintf("%s/%d", id, s))
			}, dbos.WithStepName(fmt.Sprint("s", s)))
			if err != nil {
				return s, err
			}
		}
		return steps, nil
	}
	dbos.RegisterWorkflow(dctx, wf, dbos.WithWorkflowName("bench"))
	if err := dbos.Launch(dctx); err != nil {
		b.Fatal(err)
	}
	db.begin(b)
	runFlows(b, flows, testsvc.UniqueName("wf"), func(_ context.Context, id string) error {
		h, err := dbos.RunWorkflow(dctx, wf, id, dbos.WithWorkflowID(id))
		if err != nil {
			return err
		}
		n, err := h.GetResult()
		if err == nil && n != steps {
			err = fmt.Errorf("workflow %s ran %d steps, want %d", id, n, steps)
		}
		return err
	})
	db.report(b, steps, func() { shutdown(); db.pool.Close() })
	srv.check(b, b.N*steps)
	db.checkCount(b, "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'", b.N)
	db.checkCount(b, "SELECT count(*) FROM dbos.operation_outputs", b.N*steps)
}

// benchFenceFlows runs flows of steps fenced calls in a row (steps "s0", "s1", …
// under the flow's key): one effect.Fence on idempg.TxDB.
func benchFenceFlows(b *testing.B, flows, steps int) {
	ctx := context.Background()
	srv := newStepServer(b)
	db := newFlowDB(b)
	f, err := effect.New(ctx, idempg.TxDB(db.pool), effect.Config{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, steps)
	for s := range names {
		names[s] = fmt.Sprint("s", s)
	}
	db.begin(b)
	runFlows(b, flows, testsvc.UniqueName("k"), func(ctx context.Context, id string) error {
		for _, step := range names {
			if _, err := f.Do(ctx, id, step, srv.call); err != nil {
				return err
			}
		}
		return nil
	})
	db.report(b, steps, db.pool.Close)
	srv.check(b, b.N*steps)
	db.checkCount(b, "SELECT count(*) FROM idem_effects WHERE state = 'complete'", b.N*steps)
}

// benchSagaFlows runs 4-step sagas through the orchestrator's public API: each flow
// Executes its saga, on its own goroutine, to its end. Sagas a flow left undone are
// advanced, still timed, after the flows. keyed sets saga.Step.Keyed on every step.
func benchSagaFlows(b *testing.B, flows int, keyed bool) {
	const steps = 4
	ctx := context.Background()
	srv := newStepServer(b)
	db := newFlowDB(b)
	var def saga.Definition
	def.Name = "bench"
	for s := range steps {
		def.Steps = append(def.Steps, saga.Step{
			Name:       fmt.Sprint("s", s),
			Action:     func(ctx context.Context, in saga.Input) ([]byte, error) { return srv.call(ctx, in.Key) },
			Compensate: func(context.Context, saga.Input) error { return nil },
			Keyed:      keyed,
		})
	}
	o, err := saga.New(ctx, idempg.TxDB(db.pool), saga.Config{Logger: quietLogger()}, def)
	if err != nil {
		b.Fatal(err)
	}
	db.begin(b)
	runFlows(b, flows, testsvc.UniqueName("saga"), func(ctx context.Context, id string) error {
		// Execute, as DBOS's RunWorkflow: start the saga and run it on this goroutine.
		inst, err := o.Execute(ctx, "bench", id, nil)
		if err == nil && inst.State != saga.Completed {
			err = fmt.Errorf("saga %s %s", id, inst.State)
		}
		return err
	})
	for {
		n, err := o.RunOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	db.report(b, steps, db.pool.Close)
	srv.check(b, b.N*steps)
	db.checkCount(b, "SELECT count(*) FROM idem_sagas WHERE state = 'completed'", b.N)
}
