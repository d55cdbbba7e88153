package idemtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// TxEnv is one isolated database for TxStoreSuite: a TxStore, a way to run
// transactions, and a business table to prove that the key commits with the effect.
type TxEnv[Tx any] struct {
	Store idem.TxStore[Tx]
	// Begin starts a transaction; Commit and Rollback end it.
	Begin    func(ctx context.Context) (Tx, error)
	Commit   func(ctx context.Context, tx Tx) error
	Rollback func(ctx context.Context, tx Tx) error
	// InsertEffect writes one business row (the effect) with the given id in tx.
	InsertEffect func(ctx context.Context, tx Tx, id string) error
	// CountEffects counts committed business rows with the given id.
	CountEffects func(ctx context.Context, id string) (int, error)
}

// TxStoreSuite runs the transactional contract: a claim in a rolled-back transaction
// leaves no trace, a committed one is visible together with the business row, and
// concurrent transactions on one key apply the effect once. For a store that is also
// an idem.TxRecorder, it checks RecordTx too, and RecordResultsTx for an
// idem.TxResultRecorder.
func TxStoreSuite[Tx any](t *testing.T, newEnv func(t *testing.T) TxEnv[Tx]) {
	t.Helper()
	runParallel(t, newEnv, []subtest[TxEnv[Tx]]{
		{"RollbackLeavesNoTrace", testTxRollback[Tx]},
		{"CommitIsVisibleWithEffect", testTxCommit[Tx]},
		{"ConcurrentTransactionsOneEffect", testTxConcurrent[Tx]},
		{"WaiterAcquiresAfterRollback", testTxWaiterAfterRollback[Tx]},
		{"ReleaseInTx", testTxRelease[Tx]},
		{"BadInputInTx", testTxBadInput[Tx]},
		{"TokensRiseAcrossTransactions", testTxTokensRise[Tx]},
		{"RecordTx", testTxRecord[Tx]},                     // stores with a TxRecorder
		{"RecordTxConcurrent", testTxRecordConcurrent[Tx]}, // stores with a TxRecorder
		{"RecordResultsTx", testTxRecordResults[Tx]},       // stores with a TxResultRecorder
	})
}

// applyOnce is the inbox pattern: claim, write the effect, complete, commit. It
// reports the claim outcome; the effect is written only when Acquired.
func applyOnce[Tx any](ctx context.Context, env TxEnv[Tx], c idem.Claim, effectID string, commit bool) (idem.Outcome, error) {
	tx, err := env.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	res, err := env.Store.ClaimTx(ctx, tx, c)
	if err != nil {
		_ = env.Rollback(ctx, tx)
		return 0, fmt.Errorf("ClaimTx: %w", err)
	}
	if res.Outcome != idem.Acquired {
		return res.Outcome, env.Rollback(ctx, tx)
	}
	if err := env.InsertEffect(ctx, tx, effectID); err != nil {
		_ = env.Rollback(ctx, tx)
		return 0, fmt.Errorf("insert effect: %w", err)
	}
	if err := env.Store.CompleteTx(ctx, tx, c.Key, res.Token, []byte("applied "+effectID)); err != nil {
		_ = env.Rollback(ctx, tx)
		return 0, fmt.Errorf("CompleteTx: %w", err)
	}
	if !commit {
		return idem.Acquired, env.Rollback(ctx, tx)
	}
	if err := env.Commit(ctx, tx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return idem.Acquired, nil
}

func countEffects[Tx any](t *testing.T, env TxEnv[Tx], id string) int {
	t.Helper()
	n, err := env.CountEffects(ctxFor(t), id)
	if err != nil {
		t.Fatalf("CountEffects: %v", err)
	}
	return n
}

// claimInTx claims c in a fresh transaction and rolls it back, to observe the store.
func claimInTx[Tx any](t *testing.T, env TxEnv[Tx], c idem.Claim) idem.Result {
	t.Helper()
	ctx := ctxFor(t)
	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Rollback(ctx, tx) }()
	res, err := env.Store.ClaimTx(ctx, tx, c)
	if err != nil {
		t.Fatalf("ClaimTx: %v", err)
	}
	return res
}

// acquireTx begins a transaction and claims c in it, failing t unless c is acquired.
func acquireTx[Tx any](t *testing.T, env TxEnv[Tx], c idem.Claim) (Tx, idem.Result) {
	t.Helper()
	ctx := ctxFor(t)
	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := env.Store.ClaimTx(ctx, tx, c)
	if err != nil || res.Outcome != idem.Acquired {
		_ = env.Rollback(ctx, tx)
		t.Fatalf("ClaimTx = %v, %v; want Acquired", res.Outcome, err)
	}
	return tx, res
}

func testTxRollback[Tx any](t *testing.T, env TxEnv[Tx]) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k")}
	out, err := applyOnce(ctx, env, c, "order-1", false)
	if err != nil || out != idem.Acquired {
		t.Fatalf("applyOnce = %v, %v", out, err)
	}
	if n := countEffects(t, env, "order-1"); n != 0 {
		t.Fatalf("rolled-back effect rows = %d, want 0", n)
	}
	// The key left no trace either: it can be claimed at once.
	wantOutcome(t, claimInTx(t, env, c), idem.Acquired)
}

func testTxCommit[Tx any](t *testing.T, env TxEnv[Tx]) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k"), Fingerprint: []byte("fp")}
	if out, err := applyOnce(ctx, env, c, "order-1", true); err != nil || out != idem.Acquired {
		t.Fatalf("applyOnce = %v, %v", out, err)
	}
	if n := countEffects(t, env, "order-1"); n != 1 {
		t.Fatalf("committed effect rows = %d, want 1", n)
	}
	rep := claimInTx(t, env, c)
	wantOutcome(t, rep, idem.Replayed)
	if string(rep.Record.Result) != "applied order-1" {
		t.Fatalf("replayed %q", rep.Record.Result)
	}
	// Redelivery through the same path does not apply the effect again.
	if out, err := applyOnce(ctx, env, c, "order-1", true); err != nil || out != idem.Replayed {
		t.Fatalf("redelivery: applyOnce = %v, %v; want Replayed", out, err)
	}
	if n := countEffects(t, env, "order-1"); n != 1 {
		t.Fatalf("effect rows after redelivery = %d, want 1", n)
	}
}

func testTxConcurrent[Tx any](t *testing.T, env TxEnv[Tx]) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "hot")}
	const n = 16
	var acquired atomic.Int64
	raceErrs(t, n, func(int) error {
		out, err := applyOnce(ctx, env, c, "order-hot", true)
		if err == nil && out == idem.Acquired {
			acquired.Add(1)
		}
		return err
	})
	if acquired.Load() != 1 {
		t.Fatalf("%d transactions acquired the key, want 1", acquired.Load())
	}
	if got := countEffects(t, env, "order-hot"); got != 1 {
		t.Fatalf("effect rows = %d, want exactly 1", got)
	}
}

func testTxWaiterAfterRollback[Tx any](t *testing.T, env TxEnv[Tx]) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k")}
	tx1, _ := acquireTx(t, env, c)
	type answer struct {
		out idem.Outcome
		err error
	}
	second := make(chan answer, 1)
	go func() {
		// Blocks on the first transaction (row lock or writer lock) until it ends.
		out, err := applyOnce(ctx, env, c, "order-1", true)
		second <- answer{out, err}
	}()
	if err := env.Rollback(ctx, tx1); err != nil {
		t.Fatal(err)
	}
	got := <-second
	if got.err != nil || got.out != idem.Acquired {
		t.Fatalf("claim after the holder rolled back = %v, %v; want Acquired", got.out, got.err)
	}
	if n := countEffects(t, env, "order-1"); n != 1 {
		t.Fatalf("effect rows = %d, want 1", n)
	}
}

func testTxRelease[Tx any](t *testing.T, env TxEnv[Tx]) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k")}
	tx, res := acquireTx(t, env, c)
	if err := env.Store.ReleaseTx(ctx, tx, c.Key, res.Token); err != nil {
		t.Fatalf("ReleaseTx: %v", err)
	}
	if err := env.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, claimInTx(t, env, c), idem.Acquired)
}

func testTxBadInput[Tx any](t *testing.T, env TxEnv[Tx]) {
	ctx := ctxFor(t)
	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Rollback(ctx, tx) }()
	if _, err := env.Store.ClaimTx(ctx, tx, idem.Claim{Key: idem.Key{Scope: "s"}}); !errors.Is(err, idem.ErrInvalid) {
		t.Fatalf("ClaimTx with an empty ID = %v, want ErrInvalid", err)
	}
	if err := env.Store.CompleteTx(ctx, tx, key(t, "k"), 0, nil); !errors.Is(err, idem.ErrInvalid) {
		t.Fatalf("CompleteTx with token 0 = %v, want ErrInvalid", err)
	}
	// The transaction is still usable: input errors are caught before the database.
	if res, err := env.Store.ClaimTx(ctx, tx, idem.Claim{Key: key(t, "k")}); err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("ClaimTx after bad input = %v, %v", res.Outcome, err)
	}
}

// Transactions claim a key, release it, claim it again and release it again, while
// others wait on them. A key is held by one transaction at a time, so the order in
// which ClaimTx calls acquire it is the order of the key's incarnations, and their
// tokens must rise in that order: a token drawn before waiting on another
// transaction must not come out below the tokens that transaction drew.
func testTxTokensRise[Tx any](t *testing.T, env TxEnv[Tx]) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k"), Lease: time.Minute}

	// A rolled-back claim's token is never reissued to a later one.
	tx, rolled := acquireTx(t, env, c)
	if err := env.Rollback(ctx, tx); err != nil {
		t.Fatal(err)
	}

	var (
		mu     sync.Mutex
		tokens = []uint64{rolled.Token}
	)
	const workers, rounds = 4, 8
	raceErrs(t, workers, func(int) error {
		for range rounds {
			if err := claimReleaseTwice(ctx, env, c, func(token uint64) {
				mu.Lock()
				tokens = append(tokens, token)
				mu.Unlock()
			}); err != nil {
				return err
			}
		}
		return nil
	})
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("incarnation %d of key %v got token %d after %d: tokens in acquisition order %v",
				i, c.Key, tokens[i], tokens[i-1], tokens)
		}
	}
}

// claimReleaseTwice runs one transaction that claims c and releases it twice,
// reporting each acquired token before the transaction ends (while it holds the key).
func claimReleaseTwice[Tx any](ctx context.Context, env TxEnv[Tx], c idem.Claim, acquired func(uint64)) error {
	tx, err := env.Begin(ctx)
	if err != nil {
		return err
	}
	for range 2 {
		res, err := env.Store.ClaimTx(ctx, tx, c)
		if err != nil {
			_ = env.Rollback(ctx, tx)
			return fmt.Errorf("ClaimTx: %w", err)
		}
		if res.Outcome != idem.Acquired {
			return env.Rollback(ctx, tx)
		}
		acquired(res.Token)
		if err := env.Store.ReleaseTx(ctx, tx, c.Key, res.Token); err != nil {
			_ = env.Rollback(ctx, tx)
			return fmt.Errorf("ReleaseTx: %w", err)
		}
	}
	return env.Commit(ctx, tx)
}
