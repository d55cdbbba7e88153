package idemredis

import (
	"context"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
	"github.com/redis/go-redis/v9"
)

// closeTimeout bounds the one command Close sends, since Close takes no ctx.
const closeTimeout = 5 * time.Second

// streamSettler settles one entry. It works after its source closed too: acking a
// delivery that was in flight at shutdown spares its redelivery.
type streamSettler struct {
	src  *StreamSource
	id   string // the entry id
	once brokerkit.Once
}

var _ idem.Settler = (*streamSettler)(nil)

// Ack implements idem.Settler with XACK. Acking an entry that is no longer pending
// (after a reclaim by another consumer) is not an error; a second settle of the
// delivery returns idem.ErrSettled.
func (st *streamSettler) Ack(ctx context.Context) error {
	if !st.begin() {
		return brokerkit.Settled("idemredis", "ack", st.id)
	}
	s := st.src
	if err := s.client.XAck(ctx, s.cfg.Stream, s.cfg.Group, st.id).Err(); err != nil {
		st.once.Undo()
		return backendError("ack", err)
	}
	return nil
}

// Nak implements idem.Settler: the entry stays pending with this consumer, its idle
// time set so that XAUTOCLAIM takes it again after delay (see StreamSource). A
// negative delay counts as zero.
func (st *streamSettler) Nak(ctx context.Context, delay time.Duration) error {
	if !st.begin() {
		return brokerkit.Settled("idemredis", "nak", st.id)
	}
	err := st.src.nak(ctx, st.id, max(delay, 0))
	if err != nil {
		st.once.Undo()
	}
	return err
}

// begin claims the delivery's settle (false: another settle has it). From then
// the source no longer keeps the entry from being reclaimed: if the settle fails,
// it is reclaimed after MinIdle unless a retry settles it.
func (st *streamSettler) begin() bool {
	if !st.once.Begin() {
		return false
	}
	st.src.held.Remove(st)
	return true
}

func (s *StreamSource) nak(ctx context.Context, id string, delay time.Duration) error {
	wait := max1ms(delay)
	if delay == 0 {
		wait = 0
	}
	idle := s.cfg.MinIdle.Truncate(time.Millisecond) - wait
	long := idle < 0
	if long {
		idle = 0 // the most Redis can do; this source holds the rest
	}
	if err := s.setIdle(ctx, s.client, idle, id).Err(); err != nil {
		return backendError("nak", err)
	}
	now := time.Now() // Redis set the idle time before now: the entry is due by now+wait
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !long:
		s.nakDue = append(s.nakDue, now.Add(wait))
	case !s.closed.Load():
		if len(s.deferred) == 0 {
			s.resetAt = now
		}
		s.deferred[id] = now.Add(wait)
	}
	return nil
}

// setIdle re-claims ids for this consumer with their idle time set to idle, without
// counting a delivery (JUSTID), and replies with the ids that were still pending.
func (s *StreamSource) setIdle(ctx context.Context, c processor, idle time.Duration, ids ...string) *redis.StringSliceCmd {
	args := make([]any, 0, 9+len(ids))
	args = append(args, "XCLAIM", s.cfg.Stream, s.cfg.Group, s.cfg.Consumer, 0)
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, "IDLE", ms(idle), "JUSTID")
	cmd := redis.NewStringSliceCmd(ctx, args...)
	_ = c.Process(ctx, cmd)
	return cmd
}

// processor runs one command: a client at once, or a pipeline on Exec.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// refreshDeferred keeps entries nak'ed for longer than MinIdle from being reclaimed
// early: it resets their idle time every MinIdle/3, and once an entry is within
// MinIdle of its due time, sets the idle time that makes it reclaimable then.
func (s *StreamSource) refreshDeferred(ctx context.Context) error {
	now := time.Now()
	type final struct {
		id   string
		wait time.Duration
	}
	var finals []final
	var keep []string
	s.mu.Lock()
	resetAll := !now.Before(s.resetAt.Add(s.cfg.MinIdle / 3))
	for id, due := range s.deferred {
		if wait := max1ms(due.Sub(now)); wait <= s.cfg.MinIdle {
			finals = append(finals, final{id, wait})
		} else if resetAll {
			keep = append(keep, id)
		}
	}
	s.mu.Unlock()
	if len(finals) == 0 && len(keep) == 0 {
		return nil
	}
	pipe := s.client.Pipeline()
	var kept *redis.StringSliceCmd
	if len(keep) > 0 {
		kept = s.setIdle(ctx, pipe, 0, keep...)
	}
	for _, f := range finals {
		s.setIdle(ctx, pipe, s.cfg.MinIdle.Truncate(time.Millisecond)-f.wait, f.id)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	done := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range finals {
		delete(s.deferred, f.id)
		s.nakDue = append(s.nakDue, done.Add(f.wait))
	}
	if kept != nil {
		s.resetAt = now
		pending := make(map[string]bool, len(kept.Val()))
		for _, id := range kept.Val() {
			pending[id] = true
		}
		for _, id := range keep {
			if !pending[id] {
				delete(s.deferred, id) // acked, or deleted from the stream: nothing to hold
			}
		}
	}
	return nil
}

// Close implements idem.Source: Receive returns idem.ErrClosed from now on, and
// entries delivered but not settled stay pending, to be reclaimed by another source
// of the group after MinIdle (settling them still works). If this source's consumer
// holds no pending entries, Close also removes it from the group, so consumers with
// generated names do not pile up in XINFO CONSUMERS; one that held entries at a crash
// stays listed, empty once they are reclaimed (remove it with XGROUP DELCONSUMER).
// Close sends that one command, bounded by 5s; it is idempotent.
func (s *StreamSource) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.stopKeeping()
	if !s.touched.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := s.drop.Run(ctx, s.client, []string{s.cfg.Stream}, s.cfg.Group, s.cfg.Consumer).Err()
	if err != nil && !strings.Contains(err.Error(), "NOGROUP") {
		return backendError("close", err)
	}
	return nil
}
