package effect

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/group"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
)

// Write-behind records for DoKeyed (Config.KeyedWriteBehind). DoKeyed hands its
// outcome to the Fence's writer and returns; the writer writes what waits, up to
// maxDeferredBatch records in one statement (unnest on PostgreSQL, one transaction
// elsewhere), while new records queue behind it. Until a record is written, the
// Fence answers its key and step from memory, so its later callers do not call again.
// A record is not durable until it is written: a crash before that loses it, and
// the next DoKeyed calls the downstream again with the same derived key, which the
// keyed path requires the downstream to answer from its own record.

const (
	// MaxDeferredRecords bounds the records a Fence holds unwritten under
	// Config.KeyedWriteBehind. A DoKeyed that finds it reached (the database is
	// slower than the calls, or unreachable) records its outcome itself and waits
	// for the commit, as without write-behind.
	MaxDeferredRecords = 4096
	// MaxDeferredBytes bounds the results and reasons of those records together.
	MaxDeferredBytes = 32 << 20
	// DeferredAttempts is how many times the writer writes a record alone before
	// it gives up on it: it logs the record's key, step and the database's last
	// error, and counts it in idem_effects_total{outcome="unrecorded"}. Such a
	// record is lost as a crash would lose it; the next DoKeyed calls again with
	// the same key.
	DeferredAttempts = 10
)

// maxDeferredBatch bounds the records of one write.
const maxDeferredBatch = 256

type deferred struct {
	e        Effect // key, step, state, result, reason
	now      int64
	seq      uint64
	attempts int // failed writes of this record alone
}

func (d *deferred) size() int {
	return len(d.e.Result) + len(d.e.Reason) + len(d.e.Key) + len(d.e.Step)
}

// behind is a Fence's write-behind state.
type behind struct {
	mu      sync.Mutex
	pending map[[2]string]*deferred // by key and step: answered from here until written
	queue   []*deferred             // not yet being written, oldest first
	bytes   int
	seq     uint64           // the last record's
	written uint64           // every record up to this one is written or given up
	moved   chan struct{}    // closed, and replaced, when written moves
	writing bool             // the writer runs
	failed  int              // the writer's rounds that kept records to try again, for tests
	gauge   prometheus.Gauge // idem_effects_deferred, shared by the fences of a registry; nil without one

	// Settable by tests (export_test.go).
	max, maxBytes, attempts int
	backoff                 func(failures int) time.Duration
	hold                    chan struct{} // the writer waits for it to close before each write
}

// newBehind returns a Fence's write-behind state; with reg, its records waiting
// are counted in idem_effects_deferred.
func newBehind(reg prometheus.Registerer) (*behind, error) {
	b := &behind{
		pending: map[[2]string]*deferred{}, moved: make(chan struct{}),
		max: MaxDeferredRecords, maxBytes: MaxDeferredBytes, attempts: DeferredAttempts,
		backoff: func(failures int) time.Duration {
			return min(100*time.Millisecond<<min(failures-1, 6), 5*time.Second)
		},
	}
	if reg == nil {
		return b, nil
	}
	var err error
	b.gauge, err = metrics.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idem_effects_deferred",
		Help: "Write-behind records (effect.Config.KeyedWriteBehind) not yet written, of every fence on this registry: " +
			"DoKeyed returned for them, and a crash would lose them. One that keeps rising means the database is slower than the calls, or refuses the records.",
	}))
	return b, err
}

// moveGauge adds n to idem_effects_deferred, if it is registered.
func (b *behind) moveGauge(n int) {
	if b.gauge != nil && n != 0 {
		b.gauge.Add(float64(n))
	}
}

// get returns the outcome deferred for key and step, if one waits.
func (b *behind) get(key, step string) (Effect, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.pending[[2]string{key, step}]
	if !ok {
		return Effect{}, false
	}
	e := d.e
	e.Result = slices.Clone(e.Result) // the caller's to keep
	return e, true
}

// deferRecord queues e's record and reports whether it did: false when the bounds
// are reached, and the caller must record it itself. An outcome already waiting
// for key and step stays (the first wins, as in the table).
func (f *Fence[Tx]) deferRecord(e Effect, now int64) bool {
	b := f.behind
	d := &deferred{e: e, now: now}
	b.mu.Lock()
	defer b.mu.Unlock()
	id := [2]string{e.Key, e.Step}
	if _, ok := b.pending[id]; ok {
		return true
	}
	if len(b.pending) >= b.max || b.bytes+d.size() > b.maxBytes {
		return false
	}
	b.seq++
	d.seq = b.seq
	b.pending[id] = d
	b.queue = append(b.queue, d)
	b.bytes += d.size()
	b.moveGauge(1)
	if !b.writing {
		b.writing = true
		go f.writeBehind()
	}
	return true
}

// Flush returns once every record DoKeyed deferred before it was called
// (Config.KeyedWriteBehind) is written, or given up after DeferredAttempts, or
// with ctx's error when ctx ends first. Call it before a process exits on
// purpose: what it has not written when the process ends is lost, as in a crash
// (the next DoKeyed calls again with the same key). Without write-behind it
// returns nil at once.
func (f *Fence[Tx]) Flush(ctx context.Context) error {
	b := f.behind
	if b == nil {
		return nil
	}
	b.mu.Lock()
	target := b.seq
	for b.written < target {
		moved := b.moved
		b.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
	}
	b.mu.Unlock()
	return nil
}

// writeBehind writes the queue until it is empty: one goroutine at a time.
func (f *Fence[Tx]) writeBehind() {
	b := f.behind
	failures := 0
	for {
		b.mu.Lock()
		if h := b.hold; h != nil {
			b.mu.Unlock()
			<-h
			continue
		}
		if len(b.queue) == 0 {
			b.writing = false
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), maxDeferredBatch)
		batch := slices.Clone(b.queue[:n])
		b.queue = slices.Delete(b.queue, 0, n)
		b.mu.Unlock()

		kept, done := f.writeDeferred(batch)

		b.mu.Lock()
		for _, d := range done {
			delete(b.pending, [2]string{d.e.Key, d.e.Step})
			b.bytes -= d.size()
		}
		b.moveGauge(-len(done))
		b.queue = append(kept, b.queue...)
		if len(b.queue) > 0 {
			b.written = b.queue[0].seq - 1
		} else {
			b.written = b.seq
		}
		if len(kept) > 0 {
			b.failed++
		}
		close(b.moved)
		b.moved = make(chan struct{})
		b.mu.Unlock()

		if len(kept) == 0 {
			failures = 0
			continue
		}
		failures++
		time.Sleep(b.backoff(failures))
	}
}

// writeDeferred writes batch: the records never refused together in one write,
// and then, if that fails, each alone. It returns the records to try again
// (oldest first) and those done: written, found recorded already, or given up.
func (f *Fence[Tx]) writeDeferred(batch []*deferred) (kept, done []*deferred) {
	ctx, cancel := context.WithTimeout(context.Background(), group.Timeout)
	defer cancel()
	var fresh, retried []*deferred
	for _, d := range batch {
		if d.attempts == 0 {
			fresh = append(fresh, d)
		} else {
			retried = append(retried, d)
		}
	}
	alone := retried
	if len(fresh) == 1 {
		alone = append(alone, fresh...)
	} else if len(fresh) > 1 {
		if err := f.writeDeferredBatch(ctx, fresh); err != nil {
			f.cfg.Logger.Warn("effect: deferred records not written together; writing them one by one",
				"records", len(fresh), "err", err)
			alone = append(alone, fresh...)
		} else {
			done = append(done, fresh...)
		}
	}
	for _, d := range alone {
		_, err := f.exec(ctx, f.q.Record, d.e.Key, d.e.Step, d.e.State, d.e.Result, d.e.Reason, d.now)
		switch {
		case err == nil:
			done = append(done, d)
		case d.attempts+1 >= f.behind.attempts:
			f.cfg.Logger.Error("effect: deferred record given up; the next DoKeyed of this effect calls again with the same key",
				"key", d.e.Key, "step", d.e.Step, "attempts", d.attempts+1, "err", err)
			f.count(otelx.NoSpan, d.e.Step, "unrecorded")
			done = append(done, d)
		default:
			d.attempts++
			kept = append(kept, d)
		}
	}
	slices.SortFunc(kept, func(a, b *deferred) int { return cmp.Compare(a.seq, b.seq) })
	return kept, done
}

// writeDeferredBatch writes records in one statement where the driver has
// GroupRecord, and in one transaction otherwise. A record whose effect exists
// already is skipped: the first record wins.
func (f *Fence[Tx]) writeDeferredBatch(ctx context.Context, records []*deferred) error {
	if f.groups != nil {
		f.groups.keyedRTs.Add(1)
	}
	// In (key, step) order, so that two writers lock shared rows in one order.
	sorted := slices.Clone(records)
	slices.SortFunc(sorted, func(a, b *deferred) int {
		return cmp.Or(cmp.Compare(a.e.Key, b.e.Key), cmp.Compare(a.e.Step, b.e.Step))
	})
	if f.q.GroupRecord != "" && f.db.Read != nil {
		args := groupRecordArgs(len(sorted), func(i int) recordCall {
			d := sorted[i]
			return recordCall{key: d.e.Key, step: d.e.Step, state: d.e.State, result: d.e.Result, reason: d.e.Reason, now: d.now}
		})
		return f.db.Read(ctx, func(q idemsql.Querier) error {
			return idemsql.EachRow(ctx, q, f.q.GroupRecord, args, func(idemsql.Rows) error { return nil })
		})
	}
	return idemsql.RetrySerializationFailures(ctx, func() error {
		return f.db.InTx(ctx, func(tx Tx) error {
			q := f.db.Querier(tx)
			for _, d := range sorted {
				if _, err := q.Exec(ctx, f.q.Record, d.e.Key, d.e.Step, d.e.State, d.e.Result, d.e.Reason, d.now); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
