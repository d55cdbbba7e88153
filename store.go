package idem

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Store remembers which effects were claimed and completed. Every backend (memory,
// SQLite, PostgreSQL, Redis) implements it and passes idemtest.StoreSuite.
//
// Implementations are safe for concurrent use. A duplicate is an Outcome; the error
// is non-nil only for failures: invalid input (*InputError), a lost lease
// (ErrLeaseLost), or the backend (*BackendError).
type Store interface {
	// Claim asks for the right to perform c's effect. See Outcome.
	Claim(ctx context.Context, c Claim) (Result, error)
	// Complete records the result of the effect for the holder of token and starts
	// the record's retention. Completing twice with the same token is a no-op that
	// keeps the first result. A token that no longer holds the key gets ErrLeaseLost.
	Complete(ctx context.Context, k Key, token uint64, result []byte) error
	// Release gives an in-progress key back so a retry can claim it at once. Releasing
	// a key that has no record is a no-op; a completed key gets ErrCompleted; a token
	// that no longer holds the key gets ErrLeaseLost.
	Release(ctx context.Context, k Key, token uint64) error
}

// TxStore is the transactional twin of Store for SQL backends. The claim and the
// completion join the caller's transaction Tx (pgx.Tx, *sql.Tx), so they commit or
// roll back with the business write. A concurrent claimant of the same key waits for
// the transaction: it gets Replayed after a commit and Acquired after a rollback.
type TxStore[Tx any] interface {
	ClaimTx(ctx context.Context, tx Tx, c Claim) (Result, error)
	CompleteTx(ctx context.Context, tx Tx, k Key, token uint64, result []byte) error
	ReleaseTx(ctx context.Context, tx Tx, k Key, token uint64) error
}

// Renewer is implemented by stores whose holders can extend their lease while the
// effect is still running, so that a live holder keeps its key: the lease protects
// against dead holders only. The HTTP middleware, `idem serve` and effect.Fence renew
// a held key every third of its lease until the effect ends. Every store of this
// module implements it.
type Renewer interface {
	// Renew extends the in-progress lease held by token to lease from now (zero
	// means DefaultLease). A token that no longer holds the key (its lease ran out,
	// it was taken over, released or swept) gets ErrLeaseLost, a completed key
	// ErrCompleted; neither changes the record.
	Renew(ctx context.Context, k Key, token uint64, lease time.Duration) error
}

// CheckRenew checks Renew's input (key, token, lease) and then whether ctx has
// already ended: the prologue of every backend's Renew. It returns the lease with
// the default applied.
func CheckRenew(ctx context.Context, k Key, token uint64, lease time.Duration) (time.Duration, error) {
	if lease < 0 {
		return 0, &InputError{Field: "lease", Reason: fmt.Sprintf("is negative (%s)", lease),
			Fix: "use a positive duration, or zero for the default " + DefaultLease.String()}
	}
	if lease == 0 {
		lease = DefaultLease
	}
	return lease, CheckFinish(ctx, k, token)
}

// TxRecorder is implemented by SQL stores that can record many keys as completed in
// one statement inside the caller's transaction, before the effects run: the inbox's
// fast path, one round trip per batch instead of two per message. Outcomes are as for
// ClaimTx, except that Acquired means "recorded as completed, with no result" (see
// TxResultRecorder for one with a result). They
// hold only if tx commits as a whole: a caller that rolls back part of tx (to a
// savepoint taken after RecordTx) must not use them. A key repeated within claims is
// Acquired once and Replayed after.
type TxRecorder[Tx any] interface {
	RecordTx(ctx context.Context, tx Tx, claims []Claim) ([]Outcome, error)
}

// TxResultRecorder is a TxRecorder that can store a result with each key it records
// as completed: results[i] goes with claims[i] (a nil or missing entry stores none)
// and is what a later claim of the key finds as its Record.Result, and what Inspect
// shows. Keys found already recorded keep the result they have. The inbox stores
// there the trace context of the delivery that applied a message, so the span of a
// later duplicate can link to it. A results slice longer than claims is an
// *InputError.
type TxResultRecorder[Tx any] interface {
	TxRecorder[Tx]
	RecordResultsTx(ctx context.Context, tx Tx, claims []Claim, results [][]byte) ([]Outcome, error)
}

// BatchClaimer is implemented by stores that can claim many keys in one round trip.
// Results are in the order of the claims; a claim that fails validation fails the
// whole batch before anything is written.
type BatchClaimer interface {
	ClaimBatch(ctx context.Context, claims []Claim) ([]Result, error)
}

// Sweeper is implemented by stores that remove expired records themselves (memory,
// SQLite, PostgreSQL). Redis expires keys natively and has no Sweeper.
type Sweeper interface {
	// Sweep deletes records whose lease or retention has passed and returns how many
	// it deleted.
	Sweep(ctx context.Context) (int, error)
}

// RunSweeper calls s.Sweep every interval until ctx ends, logging failures (a failed
// sweep only delays cleanup). It returns ctx's error.
func RunSweeper(ctx context.Context, s Sweeper, interval time.Duration, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				logger.WarnContext(ctx, "idem: sweep failed", "err", err)
			} else if n > 0 {
				logger.DebugContext(ctx, "idem: swept expired records", "count", n)
			}
		}
	}
}

// KeyOrder returns the indexes of claims in (scope, id) order, ties in the order
// given. A store that claims a batch in this order locks keys in one order, so two
// batches sharing keys cannot deadlock.
func KeyOrder(claims []Claim) []int {
	order := make([]int, len(claims))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ka, kb := claims[a].Key, claims[b].Key
		return cmp.Or(cmp.Compare(ka.Scope, kb.Scope), cmp.Compare(ka.ID, kb.ID))
	})
	return order
}

// FillRepeats sets the outcome of each claim that repeats an earlier key of its
// batch (out[i] still zero), from the outcome of that key's first occurrence
// first[key]: Replayed after an Acquired with the same fingerprint, Mismatch after
// one with another, and the first's outcome otherwise. For TxRecorder
// implementations.
func FillRepeats(claims []Claim, out []Outcome, first map[Key]int) {
	for i, c := range claims {
		if out[i] != 0 {
			continue
		}
		switch f := first[c.Key]; {
		case out[f] == Acquired && bytes.Equal(c.Fingerprint, claims[f].Fingerprint):
			out[i] = Replayed
		case out[f] == Acquired:
			out[i] = Mismatch
		default:
			out[i] = out[f]
		}
	}
}
