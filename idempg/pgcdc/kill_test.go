package pgcdc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/testsvc"
)

// A relay killed after the broker stored a batch and before it confirmed it leaves
// the slot where it was: the next relay republishes from the confirmed position,
// with the same {commit LSN, index} headers, and an inbox deduplicating by position
// applies each message once and drops the copies, with one watermark row in all.
func TestKillBetweenPublishAndConfirm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const n = 60
	counted := &flakySink{Sink: b.sink}
	first, err := pgcdc.New(b.url, counted, b.cfg(pgcdc.Config{BatchSize: 8}))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	before, _ := first.Status(ctx)
	b.enqueue(t, 0, n, 6)
	var end string
	if err := b.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		t.Fatal(err)
	}

	kctx, kill := context.WithCancel(ctx)
	var batches atomic.Int32
	first.SetAfterPublish(func() {
		if batches.Add(1) == 3 {
			kill() // the third batch is stored by the broker; the relay dies before confirming it
		}
	})
	if err := first.Run(kctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	killed, _ := first.Status(ctx)
	stored := b.published(t, int(counted.stored.Load())) // three batches
	last := positionOf(t, stored[len(stored)-1])
	if killed.Confirmed > last.lsn {
		t.Fatalf("the slot confirmed %s, past the last stored commit %s", pgcdc.FormatLSN(killed.Confirmed), pgcdc.FormatLSN(last.lsn))
	}
	if killed.Confirmed == before.Confirmed {
		t.Log("nothing confirmed before the kill (the first batches ended mid-transaction)")
	}

	second, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{BatchSize: 8}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, second)
	testsvc.Eventually(t, 60*time.Second, "the slot confirmed past the last commit", func() bool {
		st, _ := second.Status(ctx)
		return st.Confirmed >= mustLSN(t, end)
	})
	all := b.published(t, n+1) // every message (all confirmed, so all stored), and at least one copy
	var copies int
	seen := map[string]position{}
	for _, m := range all {
		p := positionOf(t, m)
		if q, dup := seen[m.ID]; dup {
			if q != p {
				t.Fatalf("%s republished at %v, first at %v: a copy must keep its position", m.ID, p, q)
			}
			copies++
		}
		seen[m.ID] = p
	}
	if len(seen) != n || copies == 0 {
		t.Fatalf("%d distinct messages and %d copies in the stream; want %d and some", len(seen), copies, n)
	}
	stop()

	// The consumer: JetStream in strict order, the inbox deduplicating by position.
	applied := b.applyWithLSN(t, len(all))
	if applied.rows != n || applied.distinct != n || applied.handled != n {
		t.Fatalf("ledger %d rows (%d distinct), handler ran %d times; want %d each (%d copies in the stream)", applied.rows, applied.distinct, applied.handled, n, copies)
	}
	if applied.watermarks != 1 || applied.keyRecords != 0 {
		t.Fatalf("%d watermark rows and %d key records; want 1 and 0", applied.watermarks, applied.keyRecords)
	}
	source, _, _, _ := pgcdc.MessagePosition(all[0])
	lsn, idx, ok, err := applied.tracker.Watermark(ctx, source)
	if want := positionOf(t, all[len(all)-1]); !ok || err != nil || (position{lsn, idx}) != want {
		t.Fatalf("watermark %s/%d (%v, %v), want the last message's %v", pgcdc.FormatLSN(lsn), idx, ok, err, want)
	}
	t.Logf("%d messages, %d copies dropped by position", n, copies)
}

func mustLSN(t *testing.T, s string) uint64 {
	t.Helper()
	_, lsn, _, ok := pgcdc.MessagePosition(idem.Message{Headers: map[string]string{pgcdc.HeaderSource: "x", pgcdc.HeaderLSN: s, pgcdc.HeaderIndex: "0"}})
	if !ok {
		t.Fatalf("bad LSN %q", s)
	}
	return lsn
}
