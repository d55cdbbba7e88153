package idemseq

import (
	"context"
	"hash/maphash"
	"sync"

	"github.com/idemhq/idem"
)

// Tracker is the contract every backend keeps: the same verdicts for the same history,
// whether the state lives in memory, SQL or Redis.
type Tracker interface {
	// Check records seq from producer at epoch and returns the verdict.
	Check(ctx context.Context, producer string, epoch, seq uint64) (Verdict, error)
	// Register starts a new incarnation of producer: it returns an epoch higher than
	// any before, which fences every older one, and the number to continue from.
	Register(ctx context.Context, producer string) (Registration, error)
}

// Registration is what a (re)starting producer learns from Register.
type Registration struct {
	Producer string
	// Epoch is higher than every epoch registered or seen before for Producer; stamp it
	// on every message of this incarnation.
	Epoch uint64
	// Next is one above the highest number the tracker accepted, 0 for a new producer.
	// A producer that also keeps its own counter continues from the larger of the two.
	Next uint64
}

// Config configures a tracker. The zero value is usable.
type Config struct {
	// Window is how many numbers below the watermark are remembered one by one: the
	// largest reordering tolerated. A power of two; DefaultWindow when zero.
	Window int
	// Scope names whose view of the producers this is, usually the consumer: trackers
	// with different scopes keep separate state in one table. "default" when empty.
	Scope string
	// SkipMigrate, for the SQL tracker, leaves the schema alone (for deployments
	// that apply `idem migrate print` with their own tool): NewSQLTracker then only
	// checks that idem_sequences is up to date, and fails with a *migrate.BehindError
	// naming the missing migration. Other trackers have no schema.
	SkipMigrate bool
}

// WithDefaults returns c with zero fields set to their defaults, validated: the one
// place defaults are applied, for trackers in this package and others.
func (c Config) WithDefaults() (Config, error) {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Scope == "" {
		c.Scope = "default"
	}
	if err := (idem.Key{Scope: c.Scope, ID: "x"}).Validate(); err != nil {
		ie := err.(*idem.InputError)
		return c, &idem.InputError{Field: "Config.Scope", Reason: ie.Reason, Fix: ie.Fix}
	}
	return c, checkSize(c.Window)
}

// Memory is an in-process Tracker, sharded so that producers on different shards do
// not contend. Its state dies with the process: use it where the effect does too.
type Memory struct {
	cfg    Config
	seed   maphash.Seed
	shards [64]memShard
}

type memShard struct {
	mu sync.Mutex
	m  map[string]*Window
	_  [40]byte // keep neighbouring shards' locks off one cache line
}

var _ Tracker = (*Memory)(nil)

// NewMemory returns an empty in-memory tracker.
func NewMemory(cfg Config) (*Memory, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	m := &Memory{cfg: cfg, seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].m = make(map[string]*Window)
	}
	return m, nil
}

func (m *Memory) shard(producer string) *memShard {
	return &m.shards[maphash.String(m.seed, producer)&63]
}

// window returns producer's window, creating it; the shard's lock must be held.
func (m *Memory) window(s *memShard, producer string) *Window {
	w := s.m[producer]
	if w == nil {
		w, _ = NewWindow(m.cfg.Window) // cfg.Window was validated in NewMemory
		s.m[producer] = w
	}
	return w
}

// Check implements Tracker.
func (m *Memory) Check(ctx context.Context, producer string, epoch, seq uint64) (Verdict, error) {
	if err := CheckArgs(producer, epoch, seq); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s := m.shard(producer)
	s.mu.Lock()
	v, _ := m.window(s, producer).Check(epoch, seq)
	s.mu.Unlock()
	return v, nil
}

// Register implements Tracker.
func (m *Memory) Register(ctx context.Context, producer string) (Registration, error) {
	if err := CheckArgs(producer, 0, 0); err != nil {
		return Registration{}, err
	}
	if err := ctx.Err(); err != nil {
		return Registration{}, err
	}
	s := m.shard(producer)
	s.mu.Lock()
	defer s.mu.Unlock()
	w := m.window(s, producer)
	if w.epoch >= MaxSeq {
		return Registration{}, &idem.InputError{Field: "producer", Reason: "has exhausted its epochs",
			Fix: "register under a new producer name"}
	}
	w.epoch++
	return Registration{Producer: producer, Epoch: w.epoch, Next: w.next}, nil
}

// Producers returns how many producers the tracker holds state for.
func (m *Memory) Producers() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
