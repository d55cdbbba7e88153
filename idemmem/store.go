// Package idemmem is an in-memory idem.Store: sharded, with TTL expiry and a sweeper.
//
// It is for tests, single-process services and caches in front of a durable store.
// Nothing survives a restart, so on its own it gives exactly-once results only within
// one process's life. It passes idemtest.StoreSuite like every other backend.
//
// Keys are remembered by a 128-bit hash of (scope, id) under per-process random seeds,
// not by their text: the chance that two distinct keys collide among a billion is
// below 10^-20. Completed records without a result or fingerprint (dedup only) take
// about 84 bytes of heap each (BenchmarkBytesPerKey, a million UUID keys); to get
// there they keep their expiry in whole seconds, rounded up, and report Record.Token
// as zero on replay.
//
// # Fencing tokens
//
// A token is the larger of the clock in microseconds and one above the highest token
// issued in the key's shard, drawn under the shard's lock. A key always maps to the
// same shard, so its tokens strictly rise across takeovers, releases, expiry and
// sweeps, and Renew (idem.Renewer) extends a live holder's lease under the same lock.
//
// # Memory budget
//
// Config.MaxBytes (default 512 MiB) bounds the estimated heap of the records held,
// reported by Store.Bytes and the gauge idem_records_bytes. Once full, a claim of a
// key the store holds no record of fails with ErrFull; nothing else is refused, and
// nothing is evicted: a completed record is remembered for its whole retention, and
// a claim already admitted completes with its result even past the budget, since
// refusing it after the effect ran would let a retry run the effect again. Expired
// records free their room when swept (storekit.RunSweeper) or taken over.
//
// # Inspection
//
// Store implements idem.Inspector (Inspect, List, Evict) and passes
// idemtest.InspectorSuite. List needs Config.KeepKeys, which keeps each key's text
// beside its hash (counted against MaxBytes); it has no index by scope, so a page
// walks every record, O(n log limit) for n records, with ids in ascending byte order
// and the base64url of the page's last id as cursor. A forced Evict fences the
// holder as a takeover does: the key's next token comes from its shard's counter.
// Scopes (idem.ScopeLister) also needs KeepKeys and also walks every record.
//
// # Tracing
//
// With a TracerProvider (Config.TracerProvider, else the global one once the
// application sets it), each Claim, Complete and Release is an internal span,
// idem.store.claim, idem.store.complete or idem.store.release, a child of the
// caller's span, with idem.scope, idem.key, db.system.name "memory" and, for a
// claim, idem.outcome (idem.token when acquired, idem.duplicate when the key was
// taken); ClaimBatch is one idem.store.claim_batch span. With no provider set, no
// span is started and a claim allocates nothing more.
package idemmem

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

const backend = "memory"

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Shards is the number of independently locked shards, rounded up to a power of
	// two. Zero means 64.
	Shards int
	// Now is the clock that drives leases, retention and tokens. Nil means time.Now.
	Now func() time.Time
	// MaxBytes bounds the estimated heap of the records held (see Store.Bytes). Once
	// a claim of a new key would go past it, the claim fails with a *FullError
	// (errors.Is ErrFull) inside an *idem.BackendError; expired records free their
	// room when swept or taken over. Zero means DefaultMaxBytes (512 MiB), negative
	// means unlimited. ParseMaxBytes reads it from text ("512MiB").
	MaxBytes int64
	// Registerer, if set, receives the store's Prometheus metrics.
	Registerer prometheus.Registerer
	// TracerProvider receives a span per Claim, ClaimBatch, Complete and Release
	// (see the package documentation). Nil means the global provider; while that is
	// unset, or with a no-op provider, no span is started.
	TracerProvider trace.TracerProvider
	// KeepKeys makes the store remember the text of every key beside its hash, so
	// that List (idem.Inspector) can name the keys of a scope and Scopes the scopes. It costs the key's
	// bytes plus about 64 per record, counted against MaxBytes. Without it, List
	// and Scopes fail; Inspect and Evict, which are given the key, work either way.
	KeepKeys bool
}

// Store is an in-memory idem.Store. The zero value is not usable; call New.
type Store struct {
	shards       []shard
	mask         uint64
	seedA, seedB maphash.Seed
	now          func() time.Time
	epoch        int64 // unix ns; compact records count seconds from here
	m            *metrics.Store
	tr           otelx.StoreTracer
	budget       budget
	keepKeys     bool
}

var (
	_ idem.Store        = (*Store)(nil)
	_ idem.Sweeper      = (*Store)(nil)
	_ idem.BatchClaimer = (*Store)(nil)
	_ idem.Renewer      = (*Store)(nil)
	_ idem.Inspector    = (*Store)(nil)
)

// hkey is the 128-bit hash that stands for a key.
type hkey struct{ a, b uint64 }

// shard holds two maps: live records (in progress, or completed with a result or
// fingerprint to keep), and compact completed dedup-only records.
type shard struct {
	mu   sync.Mutex
	live map[hkey]liveRecord
	done map[hkey]doneRecord
	// last is the highest token issued in this shard. A key always maps to the same
	// shard, so a new token above last exceeds every token any incarnation of the key
	// ever had, even one released or swept a nanosecond ago.
	last uint64
	// deletes counts deletions from live since it was last rebuilt; see dropLive.
	deletes int
	// credit is room drawn from the store's budget and not yet spent; see budget.
	credit int64
	// keys holds the text of each key with a record, with Config.KeepKeys only.
	keys map[hkey]idem.Key
	_    [16]byte // keep shards on separate cache lines
}

type liveRecord struct {
	token     uint64
	deadline  int64 // unix ns: end of lease, or of retention once completed
	created   int64
	retention int64
	completed bool
	fp        []byte
	result    []byte
}

// doneRecord is a completed dedup-only record in 16 bytes, so that a map slot
// (16-byte key + value) is 32 bytes: the whole token, to tell a second Complete by
// the same holder from a stale one however far apart their tokens are, and the expiry
// in whole seconds after the store's epoch, rounded up (never earlier than asked).
type doneRecord struct {
	token  uint64
	expiry uint32
}

func packDone(token uint64, expirySec uint32) doneRecord {
	return doneRecord{token: token, expiry: expirySec}
}

func (d doneRecord) expirySec() uint32       { return d.expiry }
func (d doneRecord) holds(token uint64) bool { return d.token == token }

// New returns an empty Store.
func New(cfg Config) (*Store, error) {
	n := 64
	if cfg.Shards > 0 {
		n = 1
		for n < cfg.Shards {
			n <<= 1
		}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	m, err := metrics.NewStore(cfg.Registerer, backend)
	if err != nil {
		return nil, err
	}
	s := &Store{
		shards:   make([]shard, n),
		mask:     uint64(n - 1),
		seedA:    maphash.MakeSeed(),
		seedB:    maphash.MakeSeed(),
		now:      now,
		epoch:    now().UnixNano(),
		m:        m,
		tr:       otelx.NewStoreTracer(cfg.TracerProvider, backend),
		keepKeys: cfg.KeepKeys,
	}
	switch {
	case cfg.MaxBytes == 0:
		s.budget.init(DefaultMaxBytes, n)
	case cfg.MaxBytes < 0:
		s.budget.init(-1, n)
	default:
		s.budget.init(cfg.MaxBytes, n)
	}
	for i := range s.shards {
		s.shards[i].live = make(map[hkey]liveRecord)
		s.shards[i].done = make(map[hkey]doneRecord)
		if cfg.KeepKeys {
			s.shards[i].keys = make(map[hkey]idem.Key)
		}
	}
	if err := metrics.RecordsFunc(cfg.Registerer, backend, func() float64 { return float64(s.Len()) }); err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		if _, err := metrics.Register(cfg.Registerer, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "idem_records_bytes",
			Help:        "Estimated heap of the records the store holds (in progress and completed, not yet swept); bounded by Config.MaxBytes.",
			ConstLabels: prometheus.Labels{"backend": backend},
		}, func() float64 { return float64(s.Bytes()) })); err != nil {
			return nil, err
		}
	}
	return s, nil
}
