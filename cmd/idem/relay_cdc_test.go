package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/pgcluster"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// logicalPostgres starts a private cluster with wal_level=logical for t.
func logicalPostgres(t *testing.T) string {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{})
	if err != nil {
		if testsvc.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	return c.URL
}

// idem relay --cdc publishes from the WAL with position headers, serves its
// metrics and health, and --drop-slot drops the slot.
func TestRelayCDCToNATS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := logicalPostgres(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ob, err := outbox.New(ctx, idempg.TxDB(pool), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	js := testsvc.JetStream(t, natsURL())
	stream, subject := testsvc.UniqueName("RELAYCDC_"), testsvc.UniqueName("relaycdc.")
	if _, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: stream, Subjects: []string{subject + ".>"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })

	r := startRelay(t, "--cdc", "--db", url, "--sink", natsURL(), "--slot", "cli_slot")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay output:\n%s", r.stderr)
		}
	})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueTx(ctx, tx, msg(subject+".orders", "p1"), msg(subject+".orders", "p2"), msg(subject+".orders", "p3"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := streamMessages(t, js, stream, 3)
	checkIDs(t, got, "p1", "p2", "p3")
	for i, m := range got {
		if m.Header.Get("idem-lsn") == "" || m.Header.Get("idem-lsn-index") != string(rune('0'+i)) || m.Header.Get("idem-source") != "postgres/cli_slot" {
			t.Fatalf("message %d headers %v", i, m.Header)
		}
	}
	var body string
	testsvc.Eventually(t, 15*time.Second, "/metrics with the CDC series", func() bool {
		_, body = r.get(t, "/metrics")
		return strings.Contains(body, "idem_cdc_published_total 3\n") && strings.Contains(body, "idem_cdc_retained_wal_bytes") &&
			strings.Contains(body, "idem_cdc_lag_bytes") && strings.Contains(body, "idem_cdc_active 1\n")
	})
	testsvc.Eventually(t, 15*time.Second, "/healthz ok", func() bool {
		code, hb := r.get(t, "/healthz")
		return code == 200 && strings.HasPrefix(hb, "ok")
	})
	r.stop(t)

	var out, errb bytes.Buffer
	testsvc.Eventually(t, 30*time.Second, "--drop-slot", func() bool {
		out.Reset()
		errb.Reset()
		return NewMain(&out, &errb).Run(ctx, []string{"relay", "--cdc", "--drop-slot", "--db", url, "--slot", "cli_slot"}) == nil
	})
	if !strings.Contains(out.String(), "dropped replication slot cli_slot") {
		t.Fatalf("--drop-slot printed %q %q", out.String(), errb.String())
	}
	var n int
	pool.QueryRow(ctx, "SELECT COUNT(*) FROM pg_replication_slots").Scan(&n)
	if n != 0 {
		t.Fatalf("%d slots after --drop-slot", n)
	}
}

// --cdc refuses what it cannot read: another database, and a server without
// wal_level=logical (the error names the setting).
func TestRelayCDCBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"relay", "--cdc", "--sink", "nats://127.0.0.1:4222"}, "--cdc needs --db"},
		{[]string{"relay", "--cdc", "--db", "mysql://u@127.0.0.1:3306/x", "--sink", "nats://127.0.0.1:4222"}, "--db must be postgres"},
		{[]string{"relay", "--cdc", "--db", "postgres://u@127.0.0.1:5432/x", "--sink", "nats://127.0.0.1:4222", "--slot", "Bad-Name"}, "Config.Slot"},
		{[]string{"relay", "--cdc", "--db", "postgres://u@127.0.0.1:5432/x"}, "--sink is required"},
	} {
		var out, errb bytes.Buffer
		err := NewMain(&out, &errb).Run(ctx, tc.args)
		if err == nil || !strings.Contains(err.Error()+errb.String(), tc.want) {
			t.Errorf("%v = %v %q, want %q", tc.args, err, errb.String(), tc.want)
		}
	}
	// The shared server runs with wal_level=replica.
	var out, errb bytes.Buffer
	err := NewMain(&out, &errb).Run(ctx, []string{"relay", "--cdc", "--db", testsvc.PostgresURL(), "--sink", natsURL(), "--listen", ""})
	if err == nil || !strings.Contains(err.Error(), "wal_level") || strings.Contains(err.Error(), "postgres@") {
		t.Fatalf("relay --cdc on a replica-level server = %v", err)
	}
}
