package effect

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/idemhq/idem/internal/group"
)

// KeyedStatements is how many statements DoKeyed's looks and records ran outside
// a transaction, alone or in batches (0 without groups); a batch that failed and
// ran again call by call counts each.
func KeyedStatements[Tx any](f *Fence[Tx]) int64 {
	if f.groups == nil {
		return 0
	}
	return f.groups.keyedRTs.Load()
}

// GroupBatches is how many batch statements f wrote (0 without groups).
func GroupBatches[Tx any](f *Fence[Tx]) int64 {
	if f.groups == nil {
		return 0
	}
	return f.groups.batches.Load()
}

// FinishAsBatch sets each effect key/step to complete with result if token still
// holds it, all in one batch as a runner would, and reports which did.
func FinishAsBatch[Tx any](f *Fence[Tx], ctx context.Context, keys, steps []string, tokens []int64, result []byte) []bool {
	batch := make([]*group.Item[finishCall], len(keys))
	for i := range keys {
		batch[i] = group.NewItem(ctx, finishCall{key: keys[i], step: steps[i], token: tokens[i], state: StateComplete,
			result: result, now: f.cfg.Now().UnixNano()})
	}
	f.finishBatch(batch)
	done := make([]bool, len(batch))
	for i, it := range batch {
		if it.Wait() == nil {
			done[i] = it.Val.done
		}
	}
	return done
}

// KeyedWaiting is how many DoKeyed callers of f wait on the call in flight for
// key and step.
func KeyedWaiting[Tx any](f *Fence[Tx], key, step string) int {
	return f.flights.waiting([2]string{key, step})
}

// RecordAsBatch records each effect key/step as complete with its result, all in
// one batch as a runner would, and reports which it recorded.
func RecordAsBatch[Tx any](f *Fence[Tx], ctx context.Context, keys, steps []string, results [][]byte) []bool {
	batch := make([]*group.Item[recordCall], len(keys))
	for i := range keys {
		batch[i] = group.NewItem(ctx, recordCall{key: keys[i], step: steps[i], state: StateComplete,
			result: results[i], now: f.cfg.Now().UnixNano()})
	}
	f.recordBatch(slices.Clone(batch)) // it sorts its batch
	done := make([]bool, len(batch))
	for i, it := range batch {
		if it.Wait() == nil {
			done[i] = it.Val.recorded
		}
	}
	return done
}

// LookAsBatch reads each effect key/step in one batch as a runner would, and
// returns the state and result of each ("" for one that does not exist).
func LookAsBatch[Tx any](f *Fence[Tx], ctx context.Context, keys, steps []string) (states []string, results [][]byte) {
	batch := make([]*group.Item[lookCall], len(keys))
	for i := range keys {
		batch[i] = group.NewItem(ctx, lookCall{key: keys[i], step: steps[i]})
	}
	f.lookBatch(batch)
	for _, it := range batch {
		if it.Wait() != nil {
			states, results = append(states, "error"), append(results, nil)
			continue
		}
		states, results = append(states, it.Val.e.State), append(results, it.Val.e.Result)
	}
	return states, results
}

// HoldWriteBehind stops f's write-behind writer before its next write until the
// returned release is called (a crash, for a record that release never lets go).
func HoldWriteBehind[Tx any](f *Fence[Tx]) (release func()) {
	h := make(chan struct{})
	f.behind.mu.Lock()
	f.behind.hold = h
	f.behind.mu.Unlock()
	return sync.OnceFunc(func() {
		f.behind.mu.Lock()
		f.behind.hold = nil
		f.behind.mu.Unlock()
		close(h)
	})
}

// SetWriteBehind sets f's bound on deferred records, the writes of a refused
// record before it is given up, and the wait between failed writes.
func SetWriteBehind[Tx any](f *Fence[Tx], max, attempts int, backoff time.Duration) {
	f.behind.mu.Lock()
	defer f.behind.mu.Unlock()
	f.behind.max, f.behind.attempts = max, attempts
	f.behind.backoff = func(int) time.Duration { return backoff }
}

// WriteBehindFailures is how many of f's writer rounds kept records to try again.
func WriteBehindFailures[Tx any](f *Fence[Tx]) int {
	f.behind.mu.Lock()
	defer f.behind.mu.Unlock()
	return f.behind.failed
}
