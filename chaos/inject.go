package chaos

import (
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Fault is a kind of fault and its weight among the faults of one boundary.
type Fault struct {
	Kind   string
	Weight float64
	// Max, if positive, caps how often this fault is injected in one run (for the
	// expensive ones: a paused consumer stalls its batch for a whole lease).
	Max int
	// Min, if positive, is how many of this fault a run injects before it shares
	// the hits by weight: while some faults of a Roll are below their Min, a hit
	// goes to one of those (by weight among them). The rate of hits is unchanged;
	// a short run with rare faults (a kill per batch) then draws every kind as
	// soon as it has had as many hits as kinds, instead of by luck.
	Min int
	// First, if set, injects this fault on an operation's first attempt only (a
	// message's first delivery, a request's first try); a later attempt it
	// would hit gets no fault, so the other faults' rates are unchanged. For
	// faults whose rate should follow the run's progress rather than the
	// retries other faults cause: a broker cut drawn on every redelivery, on a
	// broker where a cut redelivers the batch in hand, would draw more cuts
	// from its own redeliveries and feed on itself.
	First bool
}

// Injector decides, operation by operation, whether a fault hits and which one.
// The decision is a function of the seed, the operation's identity (a request key,
// a message id) and its attempt number, so a run with the same seed hits the same
// operations with the same faults; only goroutine scheduling differs between runs.
// It counts operations and faults. It is safe for concurrent use.
type Injector struct {
	seed uint64
	rate float64

	ops     atomic.Int64
	faulted atomic.Int64
	calm    atomic.Bool
	mu      sync.Mutex
	counts  map[string]int
}

// NewInjector returns an injector hitting a fraction rate (0 to 1) of operations.
func NewInjector(seed int64, rate float64) *Injector {
	return &Injector{seed: uint64(seed), rate: rate, counts: make(map[string]int)}
}

// Roll counts one operation and returns the fault that hits it, or "" for none.
// id and attempt identify the operation; faults are the candidates.
func (in *Injector) Roll(id string, attempt int, faults []Fault) string {
	return in.RollScaled(id, attempt, 1, faults)
}

// RollScaled is Roll with the fault rate multiplied by scale, for operations
// whose faults cost more than one operation (a crash loses a whole batch).
func (in *Injector) RollScaled(id string, attempt int, scale float64, faults []Fault) string {
	in.ops.Add(1)
	if in.calm.Load() {
		return ""
	}
	r := rand.New(rand.NewPCG(in.seed^fnvHash(id), uint64(attempt)))
	if r.Float64() >= in.rate*scale {
		return ""
	}
	if short := in.belowMin(faults); len(short) > 0 {
		faults = short
	}
	total := 0.0
	for _, f := range faults {
		total += f.Weight
	}
	x := r.Float64() * total
	for _, f := range faults {
		if x -= f.Weight; x >= 0 {
			continue
		}
		if f.First && attempt > 1 || !in.take(f) {
			return ""
		}
		in.faulted.Add(1)
		return f.Kind
	}
	return ""
}

// belowMin returns the faults injected fewer times than their Min, or nil.
func (in *Injector) belowMin(faults []Fault) []Fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	var short []Fault
	for _, f := range faults {
		if f.Min > 0 && in.counts[f.Kind] < f.Min {
			short = append(short, f)
		}
	}
	return short
}

// take counts one fault of f's kind, unless its cap is reached.
func (in *Injector) take(f Fault) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if f.Max > 0 && in.counts[f.Kind] >= f.Max {
		return false
	}
	in.counts[f.Kind]++
	return true
}

// Cancel takes back one fault of kind that Roll returned and could not be
// injected after all (a connection cut while another cut is under way).
func (in *Injector) Cancel(kind string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.counts[kind] > 0 {
		in.counts[kind]--
		in.faulted.Add(-1)
	}
}

// Count records a fault injected outside Roll (a clock jump between operations).
func (in *Injector) Count(kind string) {
	in.take(Fault{Kind: kind})
}

// Ops is the number of operations rolled, Faulted the number a fault hit.
// Calm stops injecting: every later Roll returns "". Counting goes on.
func (in *Injector) Calm() { in.calm.Store(true) }

func (in *Injector) Ops() int     { return int(in.ops.Load()) }
func (in *Injector) Faulted() int { return int(in.faulted.Load()) }

// Counts returns the faults injected, by kind.
func (in *Injector) Counts() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return maps.Clone(in.counts)
}

// Total is the number of faults injected, from Roll and Count.
func (in *Injector) Total() int {
	n := 0
	for _, v := range in.Counts() {
		n += v
	}
	return n
}

func fnvHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
