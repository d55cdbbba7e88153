package idemmem

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/idemhq/idem"
)

// DefaultMaxBytes is the budget of a Store whose Config.MaxBytes is zero: 512 MiB,
// about five million completed dedup-only keys, or fewer with results.
const DefaultMaxBytes int64 = 512 << 20

// What the budget counts per record: an estimate of its heap, not a measurement.
// A record is its map slot (16-byte hash key and value) plus the share of the map's
// control bytes and empty slots that comes with it, plus, for a live record, the
// bytes of its fingerprint and result. A compact completed record was measured at 84
// bytes per key over a million keys (BenchmarkBytesPerKey); a live record's slot is
// 104 bytes (88-byte value) before that overhead. The constants round both up, so the
// store stays at or under its budget in heap, give or take the maps' growth steps.
const (
	doneRecordBytes = 96
	liveRecordBytes = 192
)

// ErrFull is matched (errors.Is) by the error of a claim of a new key that a Store
// refused because its records would exceed Config.MaxBytes.
var ErrFull = errors.New("idemmem: memory budget full")

// FullError is the error of a claim of a new key that would take the store past its
// budget. Claims of keys the store already holds (duplicates, takeovers) and
// completions are never refused: a completed record is never dropped early to make
// room, and an effect that ran always gets its result recorded.
type FullError struct {
	MaxBytes int64 // the budget, Config.MaxBytes with the default applied
	Used     int64 // the estimated bytes of the records held when the claim came
}

func (e *FullError) Error() string {
	return fmt.Sprintf("idemmem: memory budget full: records take about %d bytes of Config.MaxBytes = %d; "+
		"raise Config.MaxBytes (idem serve: memory:?max_bytes=), shorten Claim.Retention, or sweep more often "+
		"(storekit.RunSweeper) so expired records free their room", e.Used, e.MaxBytes)
}

// Is makes errors.Is(err, ErrFull) true.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// budget counts the estimated bytes of every record of a Store. A single counter
// written by every claim and completion would be one cache line bouncing between all
// cores, which the sharded store exists to avoid; so each shard draws room from the
// counter in chunks and spends it under its own lock (shard.credit), going back to
// the counter about once per chunk. A shard that cannot draw room takes back what
// idle shards hold before it refuses, so the store refuses a new key only when its
// records and the credit of shards busy at that moment (at most two chunks each, 1/8
// of the budget in all) would exceed MaxBytes.
type budget struct {
	_     [64]byte // keep the counter off the cache lines of the fields read per call
	used  atomic.Int64
	_     [56]byte
	max   int64 // <0: unlimited
	chunk int64
}

func (b *budget) init(limit int64, shards int) {
	b.max, b.chunk = limit, 64<<10
	if limit >= 0 {
		b.chunk = min(b.chunk, limit/int64(16*shards))
	}
}

// tryAdd adds n to the counter if the result stays within the budget.
func (b *budget) tryAdd(n int64) bool {
	if b.max < 0 {
		b.used.Add(n)
		return true
	}
	for {
		used := b.used.Load()
		if used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// take spends n bytes of room on a new key in sh, drawing more from the counter if
// sh's credit is short, or reports false if they do not fit. sh.mu is held.
func (s *Store) take(sh *shard, n int64) bool {
	b := &s.budget
	if sh.credit >= n {
		sh.credit -= n
		return true
	}
	need := n - sh.credit
	switch {
	case b.tryAdd(need + b.chunk):
		sh.credit = b.chunk
	case b.tryAdd(need), s.reclaim(sh) && b.tryAdd(need):
		sh.credit = 0
	default:
		return false
	}
	return true
}

// charge accounts n bytes (negative: freed) in sh that are never refused: the
// records of keys already admitted. Credit beyond two chunks goes back to the
// counter. sh.mu is held.
func (s *Store) charge(sh *shard, n int64) {
	b := &s.budget
	sh.credit -= n
	switch {
	case sh.credit < 0:
		b.used.Add(-sh.credit)
		sh.credit = 0
	case sh.credit > 2*b.chunk:
		b.used.Add(b.chunk - sh.credit)
		sh.credit = b.chunk
	}
}

// reclaim returns the credit of every other shard it can lock without waiting (sh's
// lock is held, so waiting could deadlock with a shard doing the same). It reports
// true, for use in a condition.
func (s *Store) reclaim(sh *shard) bool {
	for i := range s.shards {
		o := &s.shards[i]
		if o == sh || !o.mu.TryLock() {
			continue
		}
		if o.credit > 0 {
			s.budget.used.Add(-o.credit)
			o.credit = 0
		}
		o.mu.Unlock()
	}
	return true
}

func (b *budget) full() error {
	return &idem.BackendError{Backend: backend, Op: "claim", Err: &FullError{MaxBytes: b.max, Used: b.used.Load()}}
}

func liveSize(r liveRecord) int64 { return liveRecordBytes + int64(len(r.fp)+len(r.result)) }

// Bytes returns the estimated heap of the records the store holds, expired or not,
// until swept: what Config.MaxBytes limits. It is exported as idem_records_bytes.
func (s *Store) Bytes() int64 {
	n := s.budget.used.Load()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n -= sh.credit
		sh.mu.Unlock()
	}
	return n
}

// ParseMaxBytes parses a byte budget for Config.MaxBytes as written in a URL or a
// flag: a whole number of bytes, optionally with a unit (KiB, MiB, GiB, TiB, or KB,
// MB, GB, TB in powers of ten; case-insensitive, B optional: "512MiB", "2g"), "0" for
// the default and a negative number (or "unlimited") for no limit.
func ParseMaxBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "unlimited" {
		return -1, nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
		{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
		{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"t", 1e12}, {"b", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || (n > 0 && n > (1<<63-1)/mult) {
		return 0, &idem.InputError{Field: "max_bytes", Reason: fmt.Sprintf("is not a byte size (%q)", s),
			Fix: `write a whole number with an optional unit, e.g. "512MiB" or "2GB"; 0 for the default, -1 for unlimited`}
	}
	if n < 0 {
		return -1, nil
	}
	return n * mult, nil
}
