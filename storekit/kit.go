package storekit

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/idemhq/idem"
)

// ValidateToken checks the token passed to Complete or Release.
func ValidateToken(token uint64) error {
	if token == 0 {
		return &idem.InputError{Field: "token", Reason: "is zero", Fix: "pass the Token of the Acquired claim result"}
	}
	return nil
}

// CheckFinish checks the arguments of Complete and Release (the key, then the token)
// and then whether ctx has already ended. Backends call it before touching storage,
// so a bad call writes nothing.
func CheckFinish(ctx context.Context, k idem.Key, token uint64) error {
	if err := k.Validate(); err != nil {
		return err
	}
	if err := ValidateToken(token); err != nil {
		return err
	}
	return ctx.Err()
}

// CheckClaim checks c (see Claim.Validate) and then whether ctx has already ended:
// the prologue of every backend's Claim.
func CheckClaim(ctx context.Context, c idem.Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	return ctx.Err()
}

// CheckBatch checks every claim of a batch, naming the first bad one by its index, and
// then whether ctx has already ended, so that a bad batch writes nothing.
func CheckBatch(ctx context.Context, claims []idem.Claim) error {
	for i, c := range claims {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("claim %d of the batch: %w", i, err)
		}
	}
	return ctx.Err()
}

// CheckRecordBatch is CheckBatch for TxResultRecorder.RecordResultsTx: results, if
// any, must not outnumber claims.
func CheckRecordBatch(ctx context.Context, claims []idem.Claim, results [][]byte) error {
	if len(results) > len(claims) {
		return &idem.InputError{Field: "results", Reason: fmt.Sprintf("has %d entries for %d claims", len(results), len(claims)),
			Fix: "pass one result per claim (nil for none), in the claims' order"}
	}
	return CheckBatch(ctx, claims)
}

// ResultAt returns results[i], or nil past its end: the result a TxResultRecorder
// stores with claim i.
func ResultAt(results [][]byte, i int) []byte {
	if i < len(results) {
		return results[i]
	}
	return nil
}

// Existing answers a claim c that found the live record rec: Replayed if rec is
// completed, InProgress if not, Mismatch if its fingerprint differs from c's (nil and
// empty are equal). It is the one place that decides what a duplicate may see, and
// every backend uses it: the stored result only on Replayed (non-nil, possibly
// empty), and never the holder's fencing token, since whoever holds a token may
// Complete or Release the key.
func Existing(c idem.Claim, rec idem.Record) idem.Result {
	rec.Key = c.Key
	rec.Token = 0
	out := idem.InProgress
	if rec.State == idem.StateCompleted {
		out = idem.Replayed
		if rec.Result == nil {
			rec.Result = []byte{}
		}
	} else {
		rec.Result = nil
	}
	if !bytes.Equal(rec.Fingerprint, c.Fingerprint) {
		// Another intent must not learn the first one's result.
		out = idem.Mismatch
		rec.Result = nil
	}
	return idem.Result{Outcome: out, Record: rec}
}

// CheckList checks List's input (scope, limit) and then whether ctx has already
// ended: the prologue of every backend's List. The cursor is the backend's to check.
func CheckList(ctx context.Context, scope string, limit int) error {
	if err := idem.ValidateKeyPart("scope", scope); err != nil {
		return err
	}
	if limit <= 0 || limit > idem.MaxListLimit {
		return &idem.InputError{Field: "limit", Reason: fmt.Sprintf("is %d, outside 1..%d", limit, idem.MaxListLimit),
			Fix: fmt.Sprintf("ask for 1 to %d records per page and follow KeyPage.Next for more", idem.MaxListLimit)}
	}
	return ctx.Err()
}

// CheckEvict checks Evict's key and then whether ctx has already ended.
func CheckEvict(ctx context.Context, k idem.Key) error {
	if err := k.Validate(); err != nil {
		return err
	}
	return ctx.Err()
}

// ErrForceNeeded is the *InputError of Evict without force on an in-progress record.
func ErrForceNeeded(k idem.Key) error {
	return &idem.InputError{Field: "force", Reason: fmt.Sprintf("is false and %v is in progress: its holder may still be running the effect", k),
		Fix: "wait for the holder to complete or release it, or evict with force to fence the holder out (its Complete then gets ErrLeaseLost and a retry may run the effect again)"}
}

// CheckScopes checks Scopes' limit and then whether ctx has already ended: the
// prologue of every backend's Scopes. The cursor is the backend's to check.
func CheckScopes(ctx context.Context, limit int) error {
	if limit <= 0 || limit > idem.MaxListLimit {
		return &idem.InputError{Field: "limit", Reason: fmt.Sprintf("is %d, outside 1..%d", limit, idem.MaxListLimit),
			Fix: fmt.Sprintf("ask for 1 to %d scopes per page and follow ScopePage.Next for more", idem.MaxListLimit)}
	}
	return ctx.Err()
}

// CheckRenew checks Renew's input (key, token, lease) and then whether ctx has
// already ended: the prologue of every backend's Renew. It returns the lease with
// the default applied.
func CheckRenew(ctx context.Context, k idem.Key, token uint64, lease time.Duration) (time.Duration, error) {
	if lease < 0 {
		return 0, &idem.InputError{Field: "lease", Reason: fmt.Sprintf("is negative (%s)", lease),
			Fix: "use a positive duration, or zero for the default " + idem.DefaultLease.String()}
	}
	if lease == 0 {
		lease = idem.DefaultLease
	}
	return lease, CheckFinish(ctx, k, token)
}

// RunSweeper calls s.Sweep every interval until ctx ends, logging failures (a failed
// sweep only delays cleanup). It returns ctx's error.
func RunSweeper(ctx context.Context, s idem.Sweeper, interval time.Duration, logger *slog.Logger) error {
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
func KeyOrder(claims []idem.Claim) []int {
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
func FillRepeats(claims []idem.Claim, out []idem.Outcome, first map[idem.Key]int) {
	for i, c := range claims {
		if out[i] != 0 {
			continue
		}
		switch f := first[c.Key]; {
		case out[f] == idem.Acquired && bytes.Equal(c.Fingerprint, claims[f].Fingerprint):
			out[i] = idem.Replayed
		case out[f] == idem.Acquired:
			out[i] = idem.Mismatch
		default:
			out[i] = out[f]
		}
	}
}
