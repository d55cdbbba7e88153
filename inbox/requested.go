package inbox

import (
	"context"
	"errors"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltext"
	"github.com/idemhq/idem/internal/wait"
)

// replayBatch bounds the requested replays one poll performs.
const replayBatch = 100

// maxReplayError bounds the error recorded with a failed requested replay.
const maxReplayError = 4096

// ReplayRequested performs the replays that operators requested
// (DeadLetterAdmin.RequestReplay) of this consumer's dead letters, up to 100 of
// them, each exactly once as Replay does, and returns how many it closed. Run
// calls it every Config.ReplayPollInterval; it is exported for consumers that
// receive on their own.
//
// A letter whose key was applied meanwhile is closed as "already applied" without
// running the handler. A failed replay stays requested, its error recorded, and is
// tried again at the next call, up to Config.MaxReplayAttempts tries (a permanent
// error gives up at once): then the request is cleared, the letter is pending again
// and LastReplayError says why.
func (c *Consumer[Tx]) ReplayRequested(ctx context.Context) (int, error) {
	type req struct {
		id       int64
		attempts int
	}
	var reqs []req
	err := read(ctx, c.db, func(q idemsql.Querier) error {
		reqs = nil
		rows, err := q.Query(ctx, c.sql.RequestedReplays, c.cfg.Consumer, replayBatch)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r req
			if err := rows.Scan(&r.id, &r.attempts); err != nil {
				return err
			}
			reqs = append(reqs, r)
		}
		return rows.Err()
	})
	if err != nil {
		return 0, &idem.BackendError{Backend: c.db.Dialect().String(), Op: "inbox.replay_requested", Err: err}
	}
	done := 0
	for _, r := range reqs {
		closed, err := c.replayRequest(ctx, r.id, r.attempts)
		if closed {
			done++
		}
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// replayRequest performs the requested replay of dead letter id, tried attempts
// times before, under its own idem.inbox.replay span. It reports whether it closed
// the letter, and returns an error only when polling must stop.
func (c *Consumer[Tx]) replayRequest(ctx context.Context, id int64, attempts int) (closed bool, err error) {
	ctx, span := c.startReplay(ctx, id, true)
	applied, rerr := c.replay(ctx, span, id, true)
	defer endReplay(span, applied, rerr)
	switch {
	case rerr == nil:
		if applied {
			c.metrics.Replayed("applied")
		} else {
			c.metrics.Replayed("already_applied")
		}
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(rerr, ErrNoDeadLetter):
		// Replayed, discarded or withdrawn meanwhile, by another process: nothing to do.
		return false, nil
	}
	if ferr := c.replayFailed(ctx, id, attempts+1, rerr); ferr != nil {
		return false, &idem.BackendError{Backend: c.db.Dialect().String(), Op: "inbox.replay_requested", Err: ferr}
	}
	return false, nil
}

// replayFailed records the attempts-th failed try of dead letter id's requested
// replay, and gives up (clears the request) after the last one.
func (c *Consumer[Tx]) replayFailed(ctx context.Context, id int64, attempts int, rerr error) error {
	giveUp := IsPermanent(rerr) || attempts >= c.cfg.MaxReplayAttempts
	msg, outcome, stmt := rerr.Error(), "failed", c.sql.ReplayFailed
	if giveUp {
		msg, outcome, stmt = "gave up: "+msg, "gave_up", c.sql.ReplayGaveUp
	}
	c.cfg.Logger.WarnContext(ctx, "inbox: requested replay failed", "consumer", c.cfg.Consumer, "dead_letter", id,
		"attempt", attempts, "gave_up", giveUp, "err", rerr)
	c.metrics.Replayed(outcome)
	return c.db.InTx(ctx, func(tx Tx) error {
		_, err := c.db.Querier(tx).Exec(ctx, stmt, sqltext.Fit(msg, maxReplayError), id)
		return err
	})
}

// pollReplays calls ReplayRequested every Config.ReplayPollInterval until ctx ends.
func (c *Consumer[Tx]) pollReplays(ctx context.Context) {
	wait.Every(ctx, c.cfg.ReplayPollInterval, func() {
		if _, err := c.ReplayRequested(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.WarnContext(ctx, "inbox: polling for requested replays failed", "consumer", c.cfg.Consumer, "err", err)
		}
	})
}
