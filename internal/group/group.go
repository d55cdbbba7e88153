// Package group shares round trips among concurrent calls: a group commit decided by
// the traffic, not by a timer.
//
// A call that finds fewer than Runners calls running goes at once, alone, on its
// caller's goroutine. One that finds them all busy waits in a queue; when a running
// call returns, its runner takes the whole queue (up to Max) as one batch. So a lone
// caller never waits for a batch to fill, and under load the round trips and commits
// per call fall with the queue's length. idemmysql's group claims and effect's
// PENDING and COMPLETE writes on PostgreSQL use it.
package group

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Timeout bounds a batch that no caller's deadline bounds (see Context).
const Timeout = 30 * time.Second

// Batcher runs calls of T alone or in batches. Run answers a batch: it must Finish
// every item it is given, before or after returning (it may hand an item to a
// goroutine of its own that finishes it later).
type Batcher[T any] struct {
	Runners int // calls or batches running at once; at least 1
	Max     int // items of one batch; at least 1
	Run     func(batch []*Item[T])

	mu      sync.Mutex
	queue   []*Item[T]
	running int
}

// Item is one call in a Batcher.
type Item[T any] struct {
	Ctx  context.Context
	Val  T // the call's request, and where Run writes its answer
	Err  error
	done chan struct{}
}

// NewItem returns an item for val, for a caller that assembles a batch itself and
// hands it to Run (tests); Do makes its own.
func NewItem[T any](ctx context.Context, val T) *Item[T] {
	return &Item[T]{Ctx: ctx, Val: val, done: make(chan struct{})}
}

// Wait returns once it is finished, with its error, or ctx's error if its ctx ends
// first.
func (it *Item[T]) Wait() error {
	select {
	case <-it.done:
		return it.Err
	case <-it.Ctx.Done():
		return it.Ctx.Err()
	}
}

// Finish ends it with err; its caller returns.
func (it *Item[T]) Finish(err error) {
	it.Err = err
	close(it.done)
}

// Do runs val alone or in a batch and returns its item once Run finished it, or ctx's
// error if ctx ends first (the batch may still carry the call out).
func (b *Batcher[T]) Do(ctx context.Context, val T) (*Item[T], error) {
	it := NewItem(ctx, val)
	b.mu.Lock()
	if b.running < max(b.Runners, 1) {
		b.running++
		b.mu.Unlock()
		b.run([]*Item[T]{it}) // alone, on the caller's goroutine
	} else {
		b.queue = append(b.queue, it)
		b.mu.Unlock()
	}
	return it, it.Wait()
}

// Queued is how many calls wait for a runner now.
func (b *Batcher[T]) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// run answers batch, then the queue while there is one, then frees its slot. The
// first batch runs on its caller's goroutine; later ones on a goroutine of their own,
// so that caller returns as soon as its own answer is in.
func (b *Batcher[T]) run(batch []*Item[T]) {
	b.answer(batch)
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.running--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go func() {
		for {
			b.mu.Lock()
			n := min(len(b.queue), max(b.Max, 1))
			if n == 0 {
				b.running--
				b.mu.Unlock()
				return
			}
			next := slices.Clone(b.queue[:n])
			b.queue = slices.Delete(b.queue, 0, n)
			b.mu.Unlock()
			b.answer(next)
		}
	}()
}

// answer drops the items whose caller gave up and gives Run the others.
func (b *Batcher[T]) answer(batch []*Item[T]) {
	live := batch[:0]
	for _, it := range batch {
		if err := it.Ctx.Err(); err != nil {
			it.Finish(err)
			continue
		}
		live = append(live, it)
	}
	if len(live) > 0 {
		b.Run(live)
	}
}

// Context bounds a batch's work by the latest deadline among its callers, or Timeout
// if one has none: a batch must not end early for one impatient caller.
func Context[T any](batch []*Item[T]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, it := range batch {
		d, ok := it.Ctx.Deadline()
		if !ok {
			return context.WithTimeout(context.Background(), Timeout)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
