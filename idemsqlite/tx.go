package idemsqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/otelx"
)

// ClaimTx implements idem.TxStore: the claim joins tx, a transaction on Store.DB()
// (or on the same file), and commits or rolls back with the caller's business
// writes. It runs on the caller's connection, not through the group-commit writer.
//
// Opened with Open, tx took the write lock at BEGIN (_txlock=immediate), so a
// concurrent claimant of the same key waits in BEGIN until tx ends: it sees Replayed
// after a commit and Acquired after a rollback. The writer waits too, so keep
// transactions short, and never call the non-Tx methods while holding one: the writer
// would wait for the lock your transaction holds until Config.BusyTimeout.
//
// Tokens issued here rise like the writer's: above the durable floor in idem_meta,
// raised in tx, and above every token this process issued, even in transactions that
// rolled back. Another process sharing the file reads the durable floor but not
// this process's rolled-back tokens; those stay below the clock in microseconds
// unless a process issues more than a million tokens a second.
func (s *Store) ClaimTx(ctx context.Context, tx *sql.Tx, c idem.Claim) (idem.Result, error) {
	ctx, span := s.tr.Claim(ctx, c.Key, true)
	start := s.m.Start()
	if err := c.Validate(); err != nil {
		otelx.EndClaim(span, idem.Result{}, err)
		return idem.Result{}, err
	}
	res, err := s.claimTx(ctx, tx, c.WithDefaults())
	s.m.Claim(c.Key.Scope, res.Outcome, err, start)
	otelx.EndClaim(span, res, err)
	return res, err
}

func (s *Store) claimTx(ctx context.Context, tx *sql.Tx, c idem.Claim) (idem.Result, error) {
	if err := s.checkTx(ctx, tx); err != nil {
		return idem.Result{}, err
	}
	res, err := s.claimRecord(ctx, txRunner{s, tx}, c, s.nowNs())
	if err != nil {
		return idem.Result{}, s.backendErr(ctx, "claim", err)
	}
	return res, nil
}

// CompleteTx implements idem.TxStore: the completion commits with tx.
func (s *Store) CompleteTx(ctx context.Context, tx *sql.Tx, k idem.Key, token uint64, result []byte) error {
	return s.tr.Finish(ctx, otelx.SpanStoreComplete, k, token, true, func(ctx context.Context) error {
		if err := s.checkTx(ctx, tx); err != nil {
			return err
		}
		return s.answer(ctx, "complete", completeRecordIn(ctx, txRunner{s, tx}, k, token, result, s.nowNs()))
	})
}

// ReleaseTx implements idem.TxStore: the release commits with tx.
func (s *Store) ReleaseTx(ctx context.Context, tx *sql.Tx, k idem.Key, token uint64) error {
	return s.tr.Finish(ctx, otelx.SpanStoreRelease, k, token, true, func(ctx context.Context) error {
		if err := s.checkTx(ctx, tx); err != nil {
			return err
		}
		return s.answer(ctx, "release", releaseRecordIn(ctx, txRunner{s, tx}, k, token, s.nowNs()))
	})
}

func (s *Store) checkTx(ctx context.Context, tx *sql.Tx) error {
	if tx == nil {
		return &idem.InputError{Field: "tx", Reason: "is nil", Fix: "pass a transaction begun on Store.DB()"}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return idem.ErrClosed
	}
	return nil
}

// answer passes the outcomes that are errors through and wraps database failures.
func (s *Store) answer(ctx context.Context, op string, err error) error {
	if err == nil || errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrCompleted) {
		return err
	}
	return s.backendErr(ctx, op, err)
}
