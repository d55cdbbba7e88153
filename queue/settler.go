package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// settler settles one delivery of a Source: its row, by id and the attempts
// its claim counted (the lease's token).
type settler[Tx any] struct {
	s        *Source[Tx]
	id       int64
	attempts int

	mu      sync.Mutex
	settled bool
	inTx    bool   // retired by SettleTx in a transaction that was to commit
	outcome string // SettleTx's, counted at the Ack that follows its commit
}

// The outcomes of idem_queue_settled_total besides idemsql's.
const (
	settledNacked    = "nacked"
	settledLeaseLost = "lease_lost"
)

// Ack retires the message (outcome "acked": its consumer, in another
// database, applied it, found it a duplicate or dead-lettered it). After
// SettleTx it only records that the delivery is settled: the retirement
// committed with the effect.
func (st *settler[Tx]) Ack(ctx context.Context) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.settled {
		return fmt.Errorf("queue row %d: %w", st.id, idem.ErrSettled)
	}
	outcome := st.outcome
	if !st.inTx {
		if err := st.finish(ctx, idemsql.QueueAcked, ""); err != nil {
			if errors.Is(err, ErrLeaseLost) {
				st.s.q.m.Settled(st.s.cfg.Topic, settledLeaseLost, 1)
			}
			// Not renewed any more: the lease runs out and the message comes
			// again, as a broker redelivers a message whose ack failed.
			st.s.forget(st)
			return err
		}
		outcome = idemsql.QueueAcked
	}
	st.s.q.m.Settled(st.s.cfg.Topic, outcome, 1)
	st.settled = true
	st.s.forget(st)
	return nil
}

// Nak puts the message back, to be claimed again after delay (its attempt
// counted).
func (st *settler[Tx]) Nak(ctx context.Context, delay time.Duration) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.settled {
		return fmt.Errorf("queue row %d: %w", st.id, idem.ErrSettled)
	}
	q := st.s.q
	at := q.cfg.Now().Add(max(delay, 0)).UnixMilli()
	err := q.db.Auto(ctx, func(qr idemsql.Querier) error {
		_, err := qr.Exec(ctx, q.stmts.Nak, at, "", st.id, st.attempts)
		return err
	})
	if err != nil {
		// Not renewed any more: the lease runs out and the message comes again
		// (the inbox logs that the broker will redeliver it). Renewed, it would
		// stay this Source's for as long as the Source lives.
		st.s.forget(st)
		return &idem.BackendError{Backend: q.db.Dialect().String(), Op: "queue.nak", Err: err}
	}
	// A Nak that found the row no longer held (retired in a transaction whose
	// commit seemed to fail but did not, taken by another claim) changed nothing.
	st.settled, st.inTx = true, false
	st.s.q.m.Settled(st.s.cfg.Topic, settledNacked, 1)
	st.s.forget(st)
	return nil
}

// finish retires the row with outcome, outside any transaction; it fails with
// ErrLeaseLost when the row is no longer held.
func (st *settler[Tx]) finish(ctx context.Context, outcome, reason string) error {
	q := st.s.q
	var n int64
	err := q.db.Auto(ctx, func(qr idemsql.Querier) error {
		var err error
		n, err = qr.Exec(ctx, q.stmts.Finish, q.cfg.Now().UnixMilli(), outcome, fitReason(reason), st.id, st.attempts)
		return err
	})
	if err != nil {
		return &idem.BackendError{Backend: q.db.Dialect().String(), Op: "queue.finish", Err: err}
	}
	if n == 0 {
		return fmt.Errorf("queue row %d: %w", st.id, ErrLeaseLost)
	}
	return nil
}

// park finishes a row that cannot be delivered as dead, with the reason, so
// it stays visible (Queue.Finished) and never blocks the rows behind it.
func (st *settler[Tx]) park(reason string) {
	ctx, cancel := context.WithTimeout(st.s.ctx, 10*time.Second)
	defer cancel()
	if err := st.finish(ctx, idemsql.QueueDead, "undeliverable: "+reason); err != nil {
		if st.s.ctx.Err() == nil { // else closed meanwhile: not parked, and nothing to say
			st.s.q.cfg.Logger.Warn("queue: parking an undeliverable message failed; it comes again after its lease",
				"topic", st.s.cfg.Topic, "row", st.id, "err", err)
		}
		return
	}
	st.s.q.m.Parked(st.s.cfg.Topic)
	st.s.q.cfg.Logger.Warn("queue: message parked: it cannot be delivered", "topic", st.s.cfg.Topic, "row", st.id, "reason", reason)
}
