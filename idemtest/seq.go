package idemtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemseq"
)

// SeqHarness builds the tracker under test: New returns a tracker with cfg on fresh
// state (its own table, schema or key prefix). MaxSteps bounds the length of each of
// the model test's 100 random histories (default 120); a backend that commits to disk
// on every check may use fewer.
type SeqHarness struct {
	New      func(t *testing.T, cfg idemseq.Config) idemseq.Tracker
	MaxSteps int
}

// SeqSuite runs the idemseq.Tracker contract against h. Every backend runs it
// unchanged, so every backend gives the same verdicts for the same history.
func SeqSuite(t *testing.T, h SeqHarness) {
	runParallel(t, func(*testing.T) SeqHarness { return h }, []subtest[SeqHarness]{
		{"InOrderThenReplay", testSeqInOrder},
		{"OutOfOrderInsideWindow", testSeqOutOfOrder},
		{"BelowWindowIsTooOld", testSeqTooOld},
		{"JumpPastWindowForgetsOldSlots", testSeqJump},
		{"EpochsFenceZombies", testSeqEpochs},
		{"RegisterContinuesSequence", testSeqRegister},
		{"ProducersAndScopesAreIsolated", testSeqIsolation},
		{"ConcurrentChecksAcceptEachNumberOnce", testSeqConcurrent},
		{"BadInput", testSeqBadInput},
		{"MatchesReferenceModel", testSeqModel},
	})
}

func seqCheck(t *testing.T, tr idemseq.Tracker, producer string, epoch, seq uint64, want idemseq.Verdict) {
	t.Helper()
	got, err := tr.Check(ctxFor(t), producer, epoch, seq)
	if err != nil {
		t.Fatalf("Check(%s, epoch %d, seq %d): %v", producer, epoch, seq, err)
	}
	if got != want {
		t.Fatalf("Check(%s, epoch %d, seq %d) = %v, want %v", producer, epoch, seq, got, want)
	}
}

func testSeqInOrder(t *testing.T, h SeqHarness) {
	tr := h.New(t, idemseq.Config{Window: 64})
	for seq := uint64(1); seq <= 100; seq++ {
		seqCheck(t, tr, "p", 0, seq, idemseq.Accepted)
	}
	for seq := uint64(100 - 63); seq <= 100; seq++ {
		seqCheck(t, tr, "p", 0, seq, idemseq.Duplicate)
	}
}

func testSeqOutOfOrder(t *testing.T, h SeqHarness) {
	tr := h.New(t, idemseq.Config{Window: 64})
	seqCheck(t, tr, "p", 0, 101, idemseq.Accepted)
	seqCheck(t, tr, "p", 0, 100, idemseq.Accepted) // 100 after 101 is still applied
	seqCheck(t, tr, "p", 0, 100, idemseq.Duplicate)
	seqCheck(t, tr, "p", 0, 101, idemseq.Duplicate)
	seqCheck(t, tr, "p", 0, 38, idemseq.Accepted) // the window's lowest slot: 101-63
	seqCheck(t, tr, "p", 0, 38, idemseq.Duplicate)
}

func testSeqTooOld(t *testing.T, h SeqHarness) {
	tr := h.New(t, idemseq.Config{Window: 64})
	seqCheck(t, tr, "p", 0, 1000, idemseq.Accepted)
	seqCheck(t, tr, "p", 0, 1000-64, idemseq.TooOld) // never seen, but below the window
	seqCheck(t, tr, "p", 0, 0, idemseq.TooOld)
	seqCheck(t, tr, "p", 0, 1000-63, idemseq.Accepted)
}

func testSeqJump(t *testing.T, h SeqHarness) {
	tr := h.New(t, idemseq.Config{Window: 64})
	for _, seq := range []uint64{5, 6, 7} {
		seqCheck(t, tr, "p", 0, seq, idemseq.Accepted)
	}
	// Jumping by less than the window keeps the old marks; by more, forgets them.
	seqCheck(t, tr, "p", 0, 60, idemseq.Accepted)
	seqCheck(t, tr, "p", 0, 6, idemseq.Duplicate)
	seqCheck(t, tr, "p", 0, 70, idemseq.Accepted) // 6 is now below the window (70-63)
	seqCheck(t, tr, "p", 0, 6, idemseq.TooOld)
	seqCheck(t, tr, "p", 0, 7, idemseq.Duplicate)
	seqCheck(t, tr, "p", 0, 70+64+5, idemseq.Accepted) // past the whole window
	for seq := uint64(70 + 6); seq < 70+64+5; seq++ {  // the slots reused by new numbers are clean
		seqCheck(t, tr, "p", 0, seq, idemseq.Accepted)
	}
}

func testSeqEpochs(t *testing.T, h SeqHarness) {
	tr := h.New(t, idemseq.Config{Window: 64})
	seqCheck(t, tr, "p", 1, 10, idemseq.Accepted)
	seqCheck(t, tr, "p", 2, 11, idemseq.Accepted) // a newer incarnation is adopted
	seqCheck(t, tr, "p", 1, 12, idemseq.Fenced)   // the zombie's new number is refused
	seqCheck(t, tr, "p", 1, 10, idemseq.Fenced)
	seqCheck(t, tr, "p", 2, 10, idemseq.Duplicate) // the sequence continues across epochs
	seqCheck(t, tr, "p", 2, 12, idemseq.Accepted)
	// Adopting a newer epoch on a duplicate still fences the older one.
	seqCheck(t, tr, "p", 3, 12, idemseq.Duplicate)
	seqCheck(t, tr, "p", 2, 13, idemseq.Fenced)
}

func testSeqRegister(t *testing.T, h SeqHarness) {
	tr := h.New(t, idemseq.Config{Window: 64})
	ctx := ctxFor(t)
	r1, err := tr.Register(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if r1.Producer != "p" || r1.Epoch == 0 || r1.Next != 0 {
		t.Fatalf("first Register = %+v, want a non-zero epoch and Next 0", r1)
	}
	for seq := uint64(0); seq < 5; seq++ {
		seqCheck(t, tr, "p", r1.Epoch, seq, idemseq.Accepted)
	}
	r2, err := tr.Register(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if r2.Epoch <= r1.Epoch || r2.Next != 5 {
		t.Fatalf("second Register = %+v after %+v and numbers 0..4, want a higher epoch and Next 5", r2, r1)
	}
	seqCheck(t, tr, "p", r1.Epoch, 5, idemseq.Fenced)
	seqCheck(t, tr, "p", r2.Epoch, r2.Next, idemseq.Accepted)
	seqCheck(t, tr, "p", r2.Epoch, 4, idemseq.Duplicate)
}

func testSeqIsolation(t *testing.T, h SeqHarness) {
	a := h.New(t, idemseq.Config{Window: 64, Scope: "consumer-a"})
	seqCheck(t, a, "p", 0, 1, idemseq.Accepted)
	seqCheck(t, a, "q", 0, 1, idemseq.Accepted)
	seqCheck(t, a, "p:q", 0, 1, idemseq.Accepted)
	seqCheck(t, a, "p", 0, 1, idemseq.Duplicate)
}

func testSeqConcurrent(t *testing.T, h SeqHarness) {
	tr := h.New(t, idemseq.Config{Window: 1024})
	const n, dup = 200, 3 // every number delivered three times, by different goroutines
	var accepted, duplicates atomic.Int64
	var mu sync.Mutex
	var errs []error
	race(16, func(g int) {
		for i := g; i < n*dup; i += 16 {
			v, err := tr.Check(context.Background(), "p", 0, uint64(i%n))
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			switch v {
			case idemseq.Accepted:
				accepted.Add(1)
			case idemseq.Duplicate:
				duplicates.Add(1)
			}
		}
	})
	if len(errs) > 0 {
		t.Fatalf("concurrent checks: %d errors: %v", len(errs), errors.Join(errs...))
	}
	if accepted.Load() != n || duplicates.Load() != n*(dup-1) {
		t.Fatalf("accepted %d, duplicates %d; want %d and %d", accepted.Load(), duplicates.Load(), n, n*(dup-1))
	}
}

func testSeqBadInput(t *testing.T, h SeqHarness) {
	tr := h.New(t, idemseq.Config{Window: 64})
	ctx := ctxFor(t)
	for _, tc := range []struct {
		producer   string
		epoch, seq uint64
		field      string
	}{
		{"", 0, 1, "producer"},
		{strings.Repeat("p", idem.MaxKeyLen+1), 0, 1, "producer"},
		{"p\x00", 0, 1, "producer"},
		{"p", 0, idemseq.MaxSeq + 1, "seq"},
		{"p", idemseq.MaxSeq + 1, 1, "epoch"},
	} {
		_, err := tr.Check(ctx, tc.producer, tc.epoch, tc.seq)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("Check(%q, %d, %d) = %v, want an *idem.InputError for %s", tc.producer, tc.epoch, tc.seq, err, tc.field)
		}
	}
	if _, err := tr.Register(ctx, ""); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf(`Register("") = %v, want idem.ErrInvalid`, err)
	}
	seqCheck(t, tr, "p", 0, idemseq.MaxSeq, idemseq.Accepted) // the limit itself is fine
}

// testSeqModel replays random histories (reorderings, duplications, epoch bumps of
// several producers) against the tracker and against a reference model that keeps
// every number it ever saw: the verdicts must agree on every step.
func testSeqModel(t *testing.T, h SeqHarness) {
	const window = 64
	maxSteps := h.MaxSteps
	if maxSteps == 0 {
		maxSteps = 120
	}
	tr := h.New(t, idemseq.Config{Window: window})
	var runs atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		run := runs.Add(1) // each history has producers of its own
		model := map[string]*seqModel{}
		steps := rapid.IntRange(1, maxSteps).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			producer := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "producer")
			m := model[producer]
			if m == nil {
				m = &seqModel{seen: map[uint64]bool{}}
				model[producer] = m
			}
			epoch := m.epoch // mostly the current incarnation; sometimes a zombie or a newer one
			switch rapid.IntRange(0, 9).Draw(rt, "epochMove") {
			case 0:
				epoch -= min(epoch, 1)
			case 1:
				epoch++
			}
			// Numbers near the watermark: new ones, reorderings, duplicates, and some
			// far below or above it.
			offset := rapid.IntRange(-window-8, 3*window/2).Draw(rt, "offset")
			seq := uint64(max(int64(m.next)+int64(offset), 0))
			want := m.check(epoch, seq, window)
			got, err := tr.Check(context.Background(), fmt.Sprintf("%d/%s", run, producer), epoch, seq)
			if err != nil {
				rt.Fatalf("Check(%s, %d, %d): %v", producer, epoch, seq, err)
			}
			if got != want {
				rt.Fatalf("step %d: Check(%s, epoch %d, seq %d) = %v, the model says %v", i, producer, epoch, seq, got, want)
			}
		}
	})
}

// seqModel is the reference: the set of every number accepted, unbounded.
type seqModel struct {
	epoch, next uint64
	seen        map[uint64]bool
}

func (m *seqModel) check(epoch, seq uint64, window uint64) idemseq.Verdict {
	if epoch < m.epoch {
		return idemseq.Fenced
	}
	m.epoch = epoch
	switch {
	case seq >= m.next:
		m.next = seq + 1
	case m.next-seq > window:
		return idemseq.TooOld
	case m.seen[seq]:
		return idemseq.Duplicate
	}
	m.seen[seq] = true
	return idemseq.Accepted
}
