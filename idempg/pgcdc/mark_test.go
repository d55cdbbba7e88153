package pgcdc_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/pgcluster"
	"github.com/idemhq/idem/internal/testsvc"
)

// unmarked lists the msg_ids of the outbox rows not marked published, parked
// ones aside.
func (b *bundle) unmarked(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT msg_id FROM idem_outbox WHERE published_at IS NULL AND parked_at IS NULL ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// waitConfirmed waits until the relay's slot is confirmed at the server's current
// position or past it.
func (b *bundle) waitConfirmed(t *testing.T, r *pgcdc.Relay, w *running) {
	t.Helper()
	end := b.currentLSN(t)
	testsvc.Eventually(t, 60*time.Second, "the slot confirmed at "+pgcdc.FormatLSN(end), func() bool {
		w.alive(t)
		st, err := r.Status(context.Background())
		return err == nil && st.Confirmed >= end
	})
}

// The relay marks the outbox rows it published (published_at) before it confirms
// them: every row is marked once the slot is confirmed past it, a parked row is
// not, EmitTx's messages (no row) are published alongside, and the marks, which
// are UPDATEs of the outbox, are not streamed back: a message committed after them
// is the only one published after them.
func TestRelayMarksWhatItPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.revokeEmit(t)
	reg := prometheus.NewRegistry()
	r := b.relay(t, b.sink, pgcdc.Config{BatchSize: 7, Messages: true, Registerer: reg})
	const n = 40
	ids := b.enqueue(t, 0, n, 4)
	b.rawRow(t, "bad", b.subject, "[not an object]") // parked, never published
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := pgcdc.EmitTx(ctx, idempg.Querier(tx), idem.Message{ID: "emitted", Topic: b.subject, Payload: []byte("e")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	w := watch(t, r)
	b.publishedIDs(t, w, n+1)
	b.waitConfirmed(t, r, w)
	if left := b.unmarked(t); len(left) > 0 {
		t.Fatalf("rows %v are not marked published with the slot confirmed past them", left)
	}
	var parkedPublished int
	if err := b.pool.QueryRow(ctx, "SELECT COUNT(*) FROM idem_outbox WHERE parked_at IS NOT NULL AND published_at IS NOT NULL").Scan(&parkedPublished); err != nil {
		t.Fatal(err)
	}
	if parkedPublished != 0 {
		t.Errorf("%d parked rows marked published", parkedPublished)
	}
	if m := gauge(t, reg, "idem_cdc_marked_total"); m != n {
		t.Errorf("idem_cdc_marked_total = %v, want %d (the rows; not the parked one, not the emitted message)", m, n)
	}

	// A sentinel committed after the marks: once it is published, anything the marks
	// caused would have been published before it.
	b.enqueue(t, n, 1, 1)
	got := b.publishedIDs(t, w, n+2)
	b.waitConfirmed(t, r, w)
	want := append(slices.Clone(ids), "emitted", fmt.Sprintf("m-%05d", n))
	if len(got) != len(want) || !slices.Equal(sortedCopy(got), sortedCopy(want)) {
		t.Fatalf("published %v, want each of %v once: the marks were streamed back and published", got, want)
	}
	if left := b.unmarked(t); len(left) > 0 {
		t.Fatalf("rows %v are not marked published", left)
	}
}

// With SkipMarkPublished the relay writes nothing to the outbox's rows.
func TestRelaySkipMarkPublished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.relay(t, b.sink, pgcdc.Config{SkipMarkPublished: true})
	ids := b.enqueue(t, 0, 5, 5)
	w := watch(t, r)
	b.publishedIDs(t, w, 5)
	b.waitConfirmed(t, r, w)
	if left := b.unmarked(t); !slices.Equal(left, ids) {
		t.Fatalf("unmarked rows %v with SkipMarkPublished, want all of %v", left, ids)
	}
}

// A mark that fails (the relay's connection to the database cut after the broker
// acknowledged a batch) ends the session without confirming the batch: the next
// session publishes it again and marks it. Confirming it unmarked would leave its
// rows unpublished for good.
func TestFailedMarkPublishesTheBatchAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := b.relay(t, b.sink, pgcdc.Config{BatchSize: 5})
	const n = 20
	b.enqueue(t, 0, n, 5)
	var cuts atomic.Int32
	r.SetAfterPublish(func() {
		if cuts.Add(1) != 2 {
			return
		}
		// The second batch: end the lock's connection (which marks), and wait until
		// its backend is gone.
		var pid int
		if err := b.pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid = hashtext('idem_cdc')::oid AND objid = hashtext($1)::oid`, b.slot).Scan(&pid); err != nil {
			t.Error(err)
			return
		}
		if _, err := b.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Error(err)
			return
		}
		// On the relay's goroutine: t.Error, not Eventually's t.Fatal (FailNow
		// belongs to the test's own goroutine).
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			var alive bool
			err := b.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive)
			if err == nil && !alive {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("the relay's connection %d did not end: %v", pid, err)
				return
			}
		}
	})
	w := watch(t, r)
	testsvc.Eventually(t, 60*time.Second, "every row marked published", func() bool {
		w.alive(t)
		return len(b.unmarked(t)) == 0
	})
	b.waitConfirmed(t, r, w)
	if cuts.Load() < 2 {
		t.Fatalf("%d batches published: the cut never happened", cuts.Load())
	}
	all := b.published(t, n+1) // the cut batch again
	seen := map[string]int{}
	for _, m := range all {
		seen[m.ID]++
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages published, want %d", len(seen), n)
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// The slot streams a transaction as soon as its commit is in the WAL, which may be
// before other sessions see it: here its commit waits for a synchronous standby
// that never answers (a cluster of its own whose commits wait for "ghost", except
// where synchronous_commit is local: everything but the test's producer). The
// relay publishes it only once it is visible: a failover before would take back a
// transaction whose message went out, and the mark's UPDATE would find no row
// (and the batch was confirmed unmarked).
func TestRelayPublishesOnlyVisibleCommits(t *testing.T) {
	t.Parallel()
	testsvc.PostgresServerBinaries(t)
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: []string{"synchronous_standby_names = 'ghost'", "synchronous_commit = local"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	b := setupOn(t, c.URL)
	r := b.relay(t, b.sink, pgcdc.Config{})
	w := watch(t, r)
	committed := make(chan error, 1)
	go func() {
		committed <- pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
				return err
			}
			_, err := b.ob.EnqueueTx(ctx, tx, idem.Message{ID: "held", Topic: b.subject})
			return err
		})
	}()
	stream, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		t.Fatal(err)
	}
	inStream := func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	testsvc.Eventually(t, 60*time.Second, "the relay to publish the message or wait for its commit", func() bool {
		w.alive(t)
		return inStream() > 0 || strings.Contains(b.logs.String(), "not visible yet")
	})
	if n := inStream(); n > 0 {
		t.Errorf("the relay published %d message(s) of a transaction whose commit waits for a synchronous standby", n)
	}
	// The standby is no longer awaited: the commit returns, and is visible.
	if _, err := b.pool.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = ''"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if got := b.publishedIDs(t, w, 1); len(got) != 1 || got[0] != "held" {
		t.Fatalf("published %v, want [held]", got)
	}
	b.waitConfirmed(t, r, w)
	if left := b.unmarked(t); len(left) > 0 {
		t.Fatalf("rows %v are not marked published with the slot confirmed past them", left)
	}
}
