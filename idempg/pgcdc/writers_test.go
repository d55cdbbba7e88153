package pgcdc_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/testsvc"
)

// The overloads of pg_logical_emit_message on PostgreSQL 14 to 16.
const emitFunctions = "pg_logical_emit_message(boolean, text, bytea), pg_logical_emit_message(boolean, text, text)"

// revokeEmit revokes EXECUTE on pg_logical_emit_message from PUBLIC in the
// bundle's database (function privileges are per database).
func (b *bundle) revokeEmit(t *testing.T) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), "REVOKE EXECUTE ON FUNCTION "+emitFunctions+" FROM PUBLIC"); err != nil {
		t.Fatal(err)
	}
}

// role creates a login role (roles are the cluster's) with the given grants in
// the bundle's database, and returns a connection to that database as it.
func (b *bundle) role(t *testing.T, grants ...string) (string, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	name := testsvc.UniqueName("role_")
	if _, err := b.pool.Exec(ctx, "CREATE ROLE "+name+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Its privileges in this database hold the role until they are dropped.
		b.pool.Exec(context.Background(), "DROP OWNED BY "+name)
		b.pool.Exec(context.Background(), "DROP ROLE "+name)
	})
	for _, g := range grants {
		if _, err := b.pool.Exec(ctx, strings.ReplaceAll(g, "$role", name)); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := url.Parse(b.url)
	u.User = url.User(name)
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return name, conn
}

// A role with no privilege on the outbox writes WAL messages of the outbox's
// prefix (PostgreSQL lets every role execute pg_logical_emit_message): a relay
// with the default Config publishes none of them, counts them, and publishes the
// outbox's rows around them.
func TestForgedWALMessagesAreNotPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, forger := b.role(t)
	reg := prometheus.NewRegistry()
	r := b.relay(t, b.sink, pgcdc.Config{Registerer: reg})
	b.enqueue(t, 0, 1, 1)
	forged := `{"id":"m-00001","topic":"` + b.subject + `","headers":{"x-kind":"payments.refund"},"payload":"cmVmdW5k"}`
	emitRaw(t, forger, forged)
	if _, err := forger.Exec(ctx, "SELECT pg_logical_emit_message(true, $1, $2::bytea)", pgcdc.EmitPrefix, []byte(forged)); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, 2, 1, 1)
	w := watch(t, r)
	testsvc.Eventually(t, 60*time.Second, "m-00002 published", func() bool {
		w.alive(t)
		return slices.Contains(b.publishedIDs(t, w, 1), "m-00002")
	})
	if got := b.publishedIDs(t, w, 2); strings.Join(got, " ") != "m-00000 m-00002" {
		t.Fatalf("published %v: a message forged by a role without privilege on the outbox reached the broker", got)
	}
	if n := gauge(t, reg, "idem_cdc_messages_ignored_total"); n != 2 {
		t.Fatalf("idem_cdc_messages_ignored_total = %v, want 2", n)
	}
}

// With Config.Messages the relay refuses to run while a role that may not insert
// into the outbox may write WAL messages (PUBLIC by default, then a role granted
// EXECUTE alone), runs once only the outbox's writers may, publishes their
// messages, and stops when EXECUTE is granted to PUBLIC again while it runs.
func TestMessagesNeedEveryEmitterToWriteTheOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{Messages: true, CheckInterval: 20 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	setupErr(t, r.Setup(ctx), "messages", "granted to PUBLIC", "REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(",
		"pg_logical_emit_message(boolean,text,bytea)", "pg_logical_emit_message(boolean,text,text)", "FROM PUBLIC")

	b.revokeEmit(t)
	writer, wconn := b.role(t, "GRANT EXECUTE ON FUNCTION "+emitFunctions+" TO $role")
	setupErr(t, r.Setup(ctx), "messages", "roles "+writer+" may write WAL messages", `FROM "`+writer+`"`)
	if _, err := b.pool.Exec(ctx, "GRANT INSERT ON idem_outbox TO "+writer); err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}

	// A role without EXECUTE cannot write one; the writer can, and the relay
	// publishes it.
	_, other := b.role(t)
	_, err = other.Exec(ctx, "SELECT pg_logical_emit_message(true, $1, '{}'::text)", pgcdc.EmitPrefix)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("a role without EXECUTE wrote a WAL message: %v", err)
	}
	w := watch(t, r)
	err = pgx.BeginFunc(ctx, wconn, func(tx pgx.Tx) error {
		_, err := pgcdc.EmitTx(ctx, idempg.Querier(tx), idem.Message{ID: "emitted", Topic: b.subject})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.publishedIDs(t, w, 1); got[0] != "emitted" {
		t.Fatalf("published %v", got)
	}

	if _, err := b.pool.Exec(ctx, "GRANT EXECUTE ON FUNCTION "+emitFunctions+" TO PUBLIC"); err != nil {
		t.Fatal(err)
	}
	testsvc.Eventually(t, 60*time.Second, "Run to stop", func() bool { over, _ := w.ended(false); return over })
	_, err = w.ended(false)
	setupErr(t, err, "messages", "granted to PUBLIC")
}
