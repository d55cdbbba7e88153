package effect

import (
	"context"

	"github.com/idemhq/idem/internal/group"
)

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
	return f.flights.waiting(key + "\x00" + step)
}
