package verify

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/wait"
)

// CDC is the log-based relay of a Flow: the slot, publication and table in Config
// must exist before the first order commits (pgcdc.Relay.Setup), or the orders
// committed before the slot are never relayed.
type CDC struct {
	URL    string // postgres://…, with the run's schema as search_path
	Config pgcdc.Config
}

// superviseCDC runs the CDC relay, restarted after each crash. A relay crash
// (FaultRelayCrash) kills it after the broker stored a batch and before it confirmed
// the batch to the slot: the next relay streams again from the confirmed position
// and republishes, with the same IDs and positions.
func (r *run) superviseCDC(ctx context.Context) {
	wrap := func(s idem.Sink) idem.Sink { return storingSink{s, &r.stored, r.markPublished} }
	r.supervise(ctx, "cdc relay", wrap, func(rctx context.Context, sink idem.Sink) error {
		cfg := r.f.CDC.Config
		cfg.Logger, cfg.LockRetry = r.log, 20*time.Millisecond
		relay, err := pgcdc.New(r.f.CDC.URL, sink, cfg)
		if err != nil {
			return err
		}
		return relay.Run(rctx)
	})
}

// storingSink records the IDs the broker acknowledged, and marks their rows
// published (mark).
type storingSink struct {
	idem.Sink
	set  *storedSet
	mark func(ctx context.Context, msgs []idem.Message)
}

func (s storingSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	err := s.Sink.Publish(ctx, msgs...)
	if err == nil {
		for _, m := range msgs {
			s.set.add(m.ID)
		}
		s.mark(ctx, msgs)
	}
	return err
}

// markPublished sets published_at on the outbox rows of msgs the broker
// acknowledged. The log-based relay marks nothing (pgcdc: rows are never marked
// published), and the audit reads the published rows only (published_at, by
// which it pages and judges the grace; a repair copies a published row): this
// stands in for a relay that would record its acknowledgements, so the audit sees
// the CDC relay's messages. It retries through connection cuts for a while; a row
// left unmarked is invisible to the audit (its loss is reported, not repaired).
func (r *run) markPublished(ctx context.Context, msgs []idem.Message) {
	if len(msgs) == 0 {
		return
	}
	args := []any{time.Now().UnixMilli()}
	in := ""
	for i, m := range msgs {
		if i > 0 {
			in += ", "
		}
		args = append(args, m.ID)
		in += "$" + strconv.Itoa(i+2)
	}
	q := "UPDATE idem_outbox SET published_at = $1 WHERE published_at IS NULL AND msg_id IN (" + in + ")"
	var err error
	for range 100 {
		if _, err = r.f.DB.ExecContext(ctx, q, args...); err == nil || ctx.Err() != nil {
			return
		}
		wait.Sleep(ctx, 20*time.Millisecond)
	}
	r.log.Warn("verify: mark the cdc relay's messages published", "err", err)
}

// storedSet is a set of message IDs, safe for concurrent use.
type storedSet struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (s *storedSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]struct{}{}
	}
	s.ids[id] = struct{}{}
}

func (s *storedSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

// unstored counts the outbox's messages the broker has not acknowledged.
func (r *run) unstored(ctx context.Context) (int, error) {
	rows, err := r.f.DB.QueryContext(ctx, "SELECT msg_id FROM idem_outbox")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return 0, err
		}
		if !r.stored.has(id) {
			n++
		}
	}
	return n, rows.Err()
}
