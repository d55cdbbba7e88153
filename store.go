package idem

import (
	"context"
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
