package verify

import (
	"context"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg/pgcdc"
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
// and republishes, with the same IDs and positions. The relay marks the rows it
// published (pgcdc's default), so the audit sees its messages as the polling
// relay's.
func (r *run) superviseCDC(ctx context.Context) {
	wrap := func(s idem.Sink) idem.Sink { return storingSink{s, &r.stored} }
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

// storingSink records the IDs the broker acknowledged: the relay's boundary
// counts what the broker stored, whatever the relay marked (a relay killed
// between the broker's acknowledgement and its mark leaves the rows unmarked until
// the next one republishes them).
type storingSink struct {
	idem.Sink
	set *storedSet
}

func (s storingSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	err := s.Sink.Publish(ctx, msgs...)
	if err == nil {
		for _, m := range msgs {
			s.set.add(m.ID)
		}
	}
	return err
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
