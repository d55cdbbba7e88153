package pgcdc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/testsvc"
)

func setupErr(t *testing.T, err error, check string, fix ...string) {
	t.Helper()
	var se *pgcdc.SetupError
	if !errors.As(err, &se) || se.Check != check {
		t.Fatalf("err = %v, want a *SetupError of check %q", err, check)
	}
	for _, f := range fix {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("err = %v, want it to name %q", err, f)
		}
	}
}

// The shared server runs with wal_level=replica: Setup and Run say so and how to fix
// it, and Run does not retry it.
func TestWALLevelNotLogical(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse(testsvc.PostgresURL())
	testsvc.Reach(t, "postgres", u.Host)
	var level string
	conn, err := pgx.Connect(context.Background(), testsvc.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	conn.QueryRow(context.Background(), "SHOW wal_level").Scan(&level)
	conn.Close(context.Background())
	if level == "logical" {
		t.Skip("the shared server has wal_level=logical")
	}
	r, err := pgcdc.New(testsvc.PostgresURL(), &noDedup{}, pgcdc.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	setupErr(t, r.Setup(context.Background()), "wal_level", "wal_level = logical", "restart")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	setupErr(t, r.Run(ctx), "wal_level")
}

// A role without REPLICATION, a publication of another table, a slot read by a
// process outside idem's lock: each is a *SetupError naming the fix.
func TestSetupRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	t.Run("privileges", func(t *testing.T) {
		role := testsvc.UniqueName("norepl_")
		if _, err := b.pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
		u, _ := url.Parse(b.url)
		u.User = url.User(role)
		r, err := pgcdc.New(u.String(), b.sink, b.cfg(pgcdc.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		setupErr(t, r.Setup(ctx), "privileges", "ALTER ROLE "+role+" REPLICATION")
	})

	t.Run("publication of another table", func(t *testing.T) {
		if _, err := b.pool.Exec(ctx, "CREATE TABLE orders (id int primary key); CREATE PUBLICATION wrong_pub FOR TABLE orders"); err != nil {
			t.Fatal(err)
		}
		r, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{Publication: "wrong_pub"}))
		if err != nil {
			t.Fatal(err)
		}
		setupErr(t, r.Setup(ctx), "publication", "public.orders", "ALTER PUBLICATION wrong_pub ADD TABLE")
	})

	t.Run("no outbox table", func(t *testing.T) {
		r, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{Publication: "pub_missing", Table: "nosuch.idem_outbox"}))
		if err != nil {
			t.Fatal(err)
		}
		setupErr(t, r.Setup(ctx), "publication", "create the outbox first")
	})

	t.Run("no right to park", func(t *testing.T) {
		admin, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{})) // creates the publication, which the role may not
		if err != nil {
			t.Fatal(err)
		}
		if err := admin.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		role, _ := b.role(t, "ALTER ROLE $role REPLICATION", "GRANT SELECT ON idem_outbox TO $role")
		u, _ := url.Parse(b.url)
		u.User = url.User(role)
		r, err := pgcdc.New(u.String(), b.sink, b.cfg(pgcdc.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		setupErr(t, r.Setup(ctx), "privileges", "may not park messages", `GRANT SELECT, INSERT, UPDATE ON "public"."idem_outbox" TO "`+role+`"`,
			"GRANT USAGE ON SEQUENCE public.idem_outbox_id_seq")
	})

	t.Run("slot taken", func(t *testing.T) {
		r, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		// pg_recvlogical's part: a reader of the slot that knows nothing of idem's lock.
		cfg, _ := pgconn.ParseConfig(b.url)
		cfg.RuntimeParams["replication"] = "database"
		other, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(ctx)
		if err := pglogrepl.StartReplication(ctx, other, b.slot, 0, pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '1'", "publication_names 'idem_outbox'"}}); err != nil {
			t.Fatal(err)
		}
		err = r.Setup(ctx)
		setupErr(t, err, "slot", "pg_terminate_backend")
		if !errors.Is(err, pgcdc.ErrSlotTaken) {
			t.Fatalf("err = %v, want ErrSlotTaken", err)
		}
		if err := r.DropSlot(ctx); !errors.Is(err, pgcdc.ErrSlotTaken) {
			t.Fatalf("DropSlot of a slot in use = %v, want ErrSlotTaken", err)
		}
	})

	t.Run("outbox schema behind", func(t *testing.T) { // last: it breaks the outbox
		if _, err := b.pool.Exec(ctx, "DROP TABLE idem_outbox_cdc_parked"); err != nil {
			t.Fatal(err)
		}
		r, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		setupErr(t, r.Setup(ctx), "outbox", "idem_outbox_cdc_parked", "idem migrate up")
	})
}

func TestConfigRefusesBadInput(t *testing.T) {
	t.Parallel()
	url := "postgres://u@127.0.0.1:1/db"
	for _, tc := range []struct {
		cfg   pgcdc.Config
		field string
	}{
		{pgcdc.Config{Slot: "Bad-Slot"}, "Config.Slot"},
		{pgcdc.Config{Slot: strings.Repeat("s", 64)}, "Config.Slot"},
		{pgcdc.Config{Publication: "p'; DROP TABLE x; --"}, "Config.Publication"},
		{pgcdc.Config{Table: "a.b.c"}, "Config.Table"},
		{pgcdc.Config{Table: "public.orders"}, "Config.Table"},
		{pgcdc.Config{MaxAttempts: -1}, "Config.MaxAttempts"},
		{pgcdc.Config{BatchSize: 20_000}, "Config.BatchSize"},
		{pgcdc.Config{FlushAfter: -1}, "Config"},
		{pgcdc.Config{Source: strings.Repeat("x", 256)}, "Config.Source"},
	} {
		_, err := pgcdc.New(url, &noDedup{}, tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("New(%+v) = %v, want an InputError on %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := pgcdc.New(url, nil, pgcdc.Config{}); err == nil {
		t.Error("nil sink accepted")
	}
	if _, err := pgcdc.New("postgres://u@host:notaport/db", &noDedup{}, pgcdc.Config{}); err == nil {
		t.Error("bad URL accepted")
	}
}

// Two relays on one slot: one reads, the other stands by on the lock and takes over
// when the first stops; every message is published, in commit order per relay.
func TestFailoverByLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	var stops []func() error
	for _, reg := range regs {
		r, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{Registerer: reg, LockRetry: 20 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, run(t, r))
	}
	active := func() int {
		n, who := 0, -1
		for i, reg := range regs {
			if gauge(t, reg, "idem_cdc_active") == 1 {
				n, who = n+1, i
			}
		}
		if n > 1 {
			t.Fatal("two relays read one slot")
		}
		return who
	}
	testsvc.Eventually(t, 30*time.Second, "one relay reading", func() bool { return active() >= 0 })
	first := active()
	b.enqueue(t, 0, 20, 5)
	b.published(t, 20)
	if err := stops[first](); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	testsvc.Eventually(t, 30*time.Second, "the standby taking over", func() bool { return active() == 1-first })
	b.enqueue(t, 20, 20, 5)
	ids := map[string]bool{}
	testsvc.Eventually(t, 60*time.Second, "all 40 published", func() bool {
		for _, m := range b.published(t, len(ids)) {
			ids[m.ID] = true
		}
		return len(ids) == 40
	})
}

// gauge reads a gauge's or a counter's value from reg, -1 when absent.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			if c := mf.GetMetric()[0].GetCounter(); c != nil {
				return c.GetValue()
			}
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// A slot retaining more WAL than RetainedWALWarn is reported in the log and the
// metric; DropSlot releases it, and is idempotent.
func TestRetainedWALWarnsAndDropSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var logs testsvc.Buffer
	reg := prometheus.NewRegistry()
	r, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{Registerer: reg, RetainedWALWarn: 1, CheckInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, r)
	b.enqueue(t, 0, 5, 5)
	testsvc.Eventually(t, 30*time.Second, "the WAL warning", func() bool {
		return strings.Contains(logs.String(), "retains much WAL") && gauge(t, reg, "idem_cdc_retained_wal_bytes") > 0
	})
	stop()
	if err := r.DropSlot(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Status(ctx); err != nil || st.Exists {
		t.Fatalf("status after DropSlot %+v, %v", st, err)
	}
	if err := r.DropSlot(ctx); err != nil {
		t.Fatalf("second DropSlot = %v", err)
	}
	if strings.Contains(logs.String(), "postgres@") || strings.Contains(fmt.Sprint(r), "postgres://") {
		t.Fatal("the connection string leaked into a log")
	}
}

// The relay's state table comes with the outbox's migrations: a role that may not
// create tables in the schema (PostgreSQL 15's default on public) starts, records
// its slot and publishes, given the grants on the outbox's tables. Without the
// table, or without the grant on it, its Setup says which fix applies.
func TestRelayRoleWithoutCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t) // outbox.New applied the outbox's migrations, idem_cdc_slots included
	pub := "pub_lowpriv"
	if _, err := b.pool.Exec(ctx, "CREATE PUBLICATION "+pub+" FOR TABLE idem_outbox WITH (publish = 'insert')"); err != nil {
		t.Fatal(err)
	}
	role, _ := b.role(t, "ALTER ROLE $role REPLICATION", "GRANT SELECT, INSERT, UPDATE ON idem_outbox TO $role",
		"GRANT INSERT ON idem_outbox_cdc_parked TO $role", "GRANT USAGE ON SEQUENCE idem_outbox_id_seq TO $role",
		"GRANT SELECT, INSERT, UPDATE ON idem_cdc_slots TO $role")
	var create bool
	if err := b.pool.QueryRow(ctx, "SELECT has_schema_privilege($1, 'public', 'CREATE')", role).Scan(&create); err != nil || create {
		t.Fatalf("role %s may create in public (%v): the test needs a role that may not", role, err)
	}
	u, _ := url.Parse(b.url)
	u.User = url.User(role)
	lowCfg := b.cfg(pgcdc.Config{Publication: pub})

	r, err := pgcdc.New(u.String(), b.sink, lowCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(ctx); err != nil {
		t.Fatalf("Setup of a role without CREATE after the migration: %v", err)
	}
	var epoch int
	if err := b.pool.QueryRow(ctx, "SELECT epoch FROM idem_cdc_slots WHERE slot = $1", b.slot).Scan(&epoch); err != nil || epoch != 1 {
		t.Fatalf("state row of %s: epoch %d, %v; want the role to have recorded epoch 1", b.slot, epoch, err)
	}
	w := watch(t, r)
	b.commit(t, idem.Message{ID: "low-1", Topic: b.subject, Payload: []byte("x")})
	if ids := b.publishedIDs(t, w, 1); len(ids) != 1 {
		t.Fatalf("published %v, want low-1", ids)
	}
	if err := w.stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	// A database whose outbox migrations predate the table: the role cannot create it.
	if _, err := b.pool.Exec(ctx, "DROP TABLE idem_cdc_slots"); err != nil {
		t.Fatal(err)
	}
	setupErr(t, r.Setup(ctx), "state", "idem_cdc_slots", "is missing", "idem migrate up", "migrate.Outbox",
		`GRANT SELECT, INSERT, UPDATE ON "public"."idem_cdc_slots" TO "`+role+`"`)

	// A role that may create it still does (the fallback); one without the grant on
	// the table it finds is told the GRANT.
	admin, err := pgcdc.New(b.url, b.sink, lowCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Setup(ctx); err != nil {
		t.Fatalf("Setup of the owner without the table (fallback): %v", err)
	}
	setupErr(t, r.Setup(ctx), "state", "may not read and write", `GRANT SELECT, INSERT, UPDATE ON "public"."idem_cdc_slots" TO "`+role+`"`)
}
