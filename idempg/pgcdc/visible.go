package pgcdc

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/wait"
)

// The slot streams a transaction as soon as its commit is in the WAL, which may be
// before other sessions see it: a commit becomes visible after it is written, and
// stays invisible while it waits for a synchronous standby (PostgreSQL 15 does not
// hold a logical slot back for one) or, for a moment, for the CPU. Publishing it
// then would send a message for a transaction that a failover can still take back
// (the standby never got it), and the mark's UPDATE would find none of its rows and
// the batch be confirmed unmarked (TestRelayMarksWhatItPublished failed so in CI).
// So a batch is published only once every transaction in it is visible in a
// snapshot of the lock's connection: what the relay publishes is what the
// application was told is committed, as with the polling relay, which can read
// nothing else.

// visibleWait bounds the wait for a batch's transactions to be visible, below the
// server's default wal_sender_timeout (60 s): the session reads nothing meanwhile.
// Past it the session ends, nothing of the batch published, and the next one waits
// again.
const visibleWait = 30 * time.Second

// visibleSQL reports whether the transactions $1 (32-bit IDs, as pgoutput gives
// them) are all visible in the statement's snapshot. A 32-bit ID is widened with
// the epoch of the snapshot's xmax: the transaction began before the snapshot, so
// its full ID is the one below xmax with these low 32 bits.
const visibleSQL = `WITH snap AS (SELECT pg_current_snapshot() AS s, pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax)
SELECT COALESCE(bool_and(pg_visible_in_snapshot((CASE WHEN (snap.xmax & ~4294967295) | x < snap.xmax THEN (snap.xmax & ~4294967295) | x
	ELSE ((snap.xmax & ~4294967295) | x) - 4294967296 END)::text::xid8, snap.s)), true)
FROM snap, unnest($1::bigint[]) AS x`

// awaitVisible returns once every transaction of the batch is visible to other
// sessions, checking only those not seen visible before (held messages are sent
// again), or fails the session after visibleWait.
func (s *stream) awaitVisible(ctx context.Context) error {
	var xids []int64
	for _, it := range s.meta {
		if !it.visible && (len(xids) == 0 || xids[len(xids)-1] != int64(it.xid)) {
			xids = append(xids, int64(it.xid))
		}
	}
	if len(xids) == 0 {
		return nil
	}
	var since time.Time
	pause := time.Duration(0) // a commit not yet visible is usually a moment from it: ask again at once
	for {
		vctx, cancel := context.WithTimeout(ctx, markTimeout)
		var visible bool
		err := s.ctl.QueryRow(vctx, visibleSQL, xids).Scan(&visible)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return backendErr("visible", err)
		}
		if visible {
			for i := range s.meta {
				s.meta[i].visible = true
			}
			return nil
		}
		now := time.Now()
		switch {
		case since.IsZero():
			since = now
		case now.Sub(since) >= visibleWait:
			return backendErr("visible", fmt.Errorf("a transaction the slot streamed is still not visible after %v (its commit waits: for a synchronous standby?); "+
				"its messages are not published until it is", visibleWait))
		case pause == 128*time.Millisecond:
			s.r.cfg.Logger.WarnContext(ctx, "cdc relay: a transaction the slot streamed is not visible yet (its commit waits: for a synchronous standby?); "+
				"its messages wait for it", "waited", now.Sub(since).Round(time.Millisecond))
		}
		if !wait.Sleep(ctx, pause) {
			return ctx.Err()
		}
		pause = min(max(2*pause, 500*time.Microsecond), 256*time.Millisecond)
	}
}
