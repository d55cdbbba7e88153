package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem"
)

// flush publishes the batch and confirms the end of the last transaction whose
// messages are all settled: acknowledged by the broker, or parked. When the batch
// fails as a whole its messages are sent again one by one (settle).
func (s *stream) flush(ctx context.Context) error {
	if len(s.batch) == 0 {
		return s.confirmTo(ctx, 0)
	}
	if err := s.awaitVisible(ctx); err != nil {
		return err
	}
	start := time.Now()
	n, published, err := len(s.batch), len(s.batch), s.publish(ctx, s.batch...)
	if err == nil {
		s.observe(start, 0, n)
	} else if ctx.Err() == nil {
		n, published, err = s.settle(ctx, err)
	}
	if s.r.afterPublish != nil && published > 0 {
		s.r.afterPublish()
	}
	if ctx.Err() != nil { // killed between publish and confirm: confirm nothing
		return ctx.Err()
	}
	if published > 0 {
		// Before the confirm: a confirmed message is a marked one. A mark that fails
		// ends the session unconfirmed, and the batch is published again.
		if err := s.mark(ctx, n); err != nil {
			return err
		}
	}
	if err != nil {
		if cerr := s.confirmTo(ctx, n); cerr != nil {
			return cerr
		}
		var h *holdError
		if !errors.As(err, &h) {
			return err
		}
		return s.hold(ctx, n, published, h)
	}
	s.r.prog.settled(time.Now(), published > 0)
	s.flushed++
	s.held = 0
	err = s.confirmTo(ctx, n)
	clear(s.batch)
	s.batch, s.meta = s.batch[:0], s.meta[:0]
	return err
}

// hold keeps the messages from n on, which all failed Config.MaxAttempts times in
// a row, at the front of the batch: the session goes on reading, and they are sent
// again with the next message or at a backoff's end, whichever comes first.
func (s *stream) hold(ctx context.Context, n, published int, h *holdError) error {
	if n > 0 {
		s.flushed++
		s.batch = append(s.batch[:0], s.batch[n:]...)
		s.meta = append(s.meta[:0], s.meta[n:]...)
	}
	now := time.Now()
	s.held = len(s.batch)
	s.retryAt = now.Add(min(100*time.Millisecond<<min(h.attempts-s.r.cfg.MaxAttempts, 7), 10*time.Second))
	s.r.prog.update(func(p *Health) {
		p.LastError = h.err
		if published > 0 {
			p.LastPublished = now
		}
	})
	s.r.cfg.Logger.WarnContext(ctx, "cdc relay: holding a message the broker keeps refusing until one after it is published", "err", h.err)
	return nil
}

// observe counts the messages from..to of the batch as published by a Publish call
// that started at start.
func (s *stream) observe(start time.Time, from, to int) {
	m := s.r.m
	if m == nil {
		return
	}
	now := time.Now()
	m.publish.Observe(now.Sub(start).Seconds())
	m.published.Add(float64(to - from))
	for _, it := range s.meta[from:to] {
		m.commitLag.Observe(now.Sub(it.at).Seconds())
	}
}

// publish sends msgs to the sink, recording a failure.
func (s *stream) publish(ctx context.Context, msgs ...idem.Message) error {
	err := s.r.sink.Publish(ctx, msgs...)
	if err != nil && ctx.Err() == nil {
		if m := s.r.m; m != nil {
			m.failures.Inc()
		}
		s.r.prog.update(func(h *Health) { h.LastError = err })
	}
	return err
}

// confirmTo confirms the end of the last completed transaction all of whose
// messages lie in the first n of the batch, and forgets the transactions ended.
func (s *stream) confirmTo(ctx context.Context, n int) error {
	end := uint64(0)
	for len(s.ends) > 0 && (n >= len(s.batch) || s.ends[0].commit < s.meta[n].pos.commit) {
		end = s.ends[0].end
		s.ends = s.ends[1:]
	}
	if end <= s.confirmed {
		return nil
	}
	s.confirm(end)
	return s.status(ctx)
}

// confirm moves the confirmed position to lsn and forgets what this relay kept of
// the messages before it.
func (s *stream) confirm(lsn uint64) {
	s.confirmed = lsn
	for p := range s.r.parked {
		if p.commit < lsn {
			delete(s.r.parked, p)
		}
	}
	for p := range s.r.attempts {
		if p.commit < lsn {
			delete(s.r.attempts, p)
		}
	}
}

// held is a message that failed Config.MaxAttempts times in a row, waiting for a
// message after it to go through before it is parked.
type held struct {
	i   int
	err error
}

// settle sends the batch again one message at a time after it failed as a whole
// (with batchErr), so that one bad message costs only itself; the messages the
// sink says the broker accepted (an *idem.PublishError) count as published
// without being sent again. A message the sink refuses as invalid is parked.
// One that fails otherwise counts an attempt and ends the session, to be streamed
// again with backoff; after Config.MaxAttempts in a row it is held, and parked as
// soon as a message after it goes through (the broker works; that message does
// not). A broker that refuses everything parks nothing.
// settle returns how many messages from the front are settled, how many the broker
// acknowledged, and the error that stopped it: a *holdError when the messages left
// are held ones only.
func (s *stream) settle(ctx context.Context, batchErr error) (settled, published int, err error) {
	// What the broker acknowledged of the failed batch (idem.PublishError) is
	// published: it is not sent again.
	var accepted []bool
	if pe := (*idem.PublishError)(nil); errors.As(batchErr, &pe) && len(pe.Accepted) == len(s.batch) {
		accepted = pe.Accepted
	}
	var stuck []held
	front := func(i int) int {
		if len(stuck) > 0 {
			return stuck[0].i
		}
		return i
	}
	for i := range s.batch {
		pos := s.meta[i].pos
		if s.r.parked[pos] {
			continue // parked in an earlier round, behind a held message
		}
		start, err := time.Now(), batchErr
		switch {
		case accepted != nil && accepted[i]:
			err = nil
		case len(s.batch) > 1:
			err = s.publish(ctx, s.batch[i])
		}
		switch {
		case err == nil:
			s.observe(start, i, i+1)
			published++
			delete(s.r.attempts, pos)
			for _, h := range stuck {
				if err := s.parkSent(ctx, h.i, h.err); err != nil {
					return h.i, published, err
				}
			}
			stuck = stuck[:0]
		case ctx.Err() != nil:
			return front(i), published, ctx.Err()
		case unpublishable(err):
			if err := s.parkSent(ctx, i, err); err != nil {
				return front(i), published, err
			}
		default:
			s.r.attempts[pos]++
			if s.r.attempts[pos] < s.r.cfg.MaxAttempts {
				return front(i), published, s.stuck(i, err)
			}
			stuck = append(stuck, held{i, err})
		}
	}
	if len(stuck) > 0 {
		pos := s.meta[stuck[0].i].pos
		return stuck[0].i, published, &holdError{attempts: s.r.attempts[pos], err: s.stuck(stuck[0].i, stuck[0].err)}
	}
	return len(s.batch), published, nil
}

// holdError ends settle when the messages left in the batch all failed
// Config.MaxAttempts times: they wait for a later message (stream.hold).
type holdError struct {
	attempts int
	err      error // the first one's
}

func (e *holdError) Error() string { return e.err.Error() }

// unpublishable reports whether a sink's error says the message itself cannot be
// published, so that sending it again is pointless.
func unpublishable(err error) bool {
	var ie *idem.InputError
	return errors.As(err, &ie) || idem.IsPermanent(err)
}

// stuckError is a message the broker keeps refusing, with everything after it
// waiting for it.
type stuckError struct {
	id, topic     string
	pos           position
	skip          uint64 // confirming it skips the transaction
	attempts, max int
	slot          string
	err           error
}

func (e *stuckError) Error() string {
	return fmt.Sprintf("pgcdc: message %q to %q (message %d of the transaction committed at %s) failed %d times in a row: %v (fix the broker "+
		"or the message's topic: the relay retries it, and parks it once it failed %d times and a message after it is published; "+
		"or skip the whole transaction, whose messages not yet published are then never published: stop the relay and "+
		"SELECT pg_replication_slot_advance('%s', '%s'))",
		e.id, e.topic, e.pos.index, FormatLSN(e.pos.commit), e.attempts, e.err, e.max, e.slot, FormatLSN(e.skip))
}

func (e *stuckError) Unwrap() error { return e.err }

// stuck is the error of message i of the batch failing with err. Its skip advice
// confirms the end of the message's transaction. A slot skips every transaction
// whose commit record starts before its confirmed position, so before the commit
// is read (the batch was sent first) the position just after the commit's start
// skips it as well: the confirmed position at the start of the commit, which
// pgoutput reports, would not.
func (s *stream) stuck(i int, err error) error {
	it, m := s.meta[i], s.batch[i]
	e := &stuckError{id: m.ID, topic: m.Topic, pos: it.pos, skip: it.pos.commit + 1, attempts: s.r.attempts[it.pos], max: s.r.cfg.MaxAttempts,
		slot: s.r.cfg.Slot, err: err}
	for _, t := range s.ends {
		if t.commit == it.pos.commit {
			e.skip = t.end
		}
	}
	return &idem.BackendError{Backend: "sink", Op: "cdc.publish", Err: e}
}
