package main

import (
	"context"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testsvc"
)

// Behind PgBouncer in transaction pooling (testsvc.PgBouncer), `idem relay --db`
// with default_query_exec_mode=exec starts, says it cannot LISTEN there, polls and
// publishes; without that setting it refuses, naming it, as `idem serve --store`
// does.
func TestRelayAndServeBehindPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pooled := testsvc.PgBouncer(t, testsvc.PostgresDatabase(t))
	u, _ := url.Parse(pooled)
	q := u.Query()
	q.Set("default_query_exec_mode", "exec")
	u.RawQuery = q.Encode()
	exec := u.String()

	stderr, err := relayStartErr(t, "--db", pooled, "--sink", natsURL())
	if err == nil || !strings.Contains(err.Error()+stderr, "default_query_exec_mode=exec") {
		t.Errorf("idem relay --db through PgBouncer, default mode: err %v, stderr %q; want a refusal naming default_query_exec_mode=exec", err, stderr)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = NewMain(io.Discard, io.Discard).Run(sctx, []string{"serve", "--listen", "127.0.0.1:0",
		"--upstream", "http://" + testsvc.ClosedAddr(t), "--store", pooled})
	if err == nil || !strings.Contains(err.Error(), "--store") || !strings.Contains(err.Error(), "default_query_exec_mode=exec") {
		t.Errorf("idem serve --store through PgBouncer, default mode = %v; want a refusal naming --store and default_query_exec_mode=exec", err)
	}

	pool, ob := postgresOutbox(t, exec)
	js, stream, subject := natsTestStream(t)
	r := startRelay(t, "--db", exec, "--sink", natsURL(), "--poll", "50ms")
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
		t.Fatalf("enqueue through PgBouncer: %v", err)
	}
	checkIDs(t, streamMessages(t, js, stream, 3), "p1", "p2", "p3")
	r.checkHTTP(t, 3)
	// The relay says so from its listening goroutine, maybe after publishing on a
	// loaded machine: wait for the line (bounded).
	for deadline := time.Now().Add(time.Minute); !strings.Contains(r.stderr.String(), "polling only") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if out := r.stderr.String(); !strings.Contains(out, "polling only") || !strings.Contains(out, "direct connection") {
		t.Errorf("relay output does not say it polls only:\n%s", out)
	}
	r.stop(t)
}
