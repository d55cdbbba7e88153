package idemkey

import (
	"crypto/rand"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/oklog/ulid/v2"
)

// maxMilli is the largest Unix millisecond a UUIDv7 or ULID can carry (48 bits, in the
// year 10889).
const maxMilli = 1<<48 - 1

// std backs NewV7 and NewULID. Monotonicity is a promise about one process, so its
// state has to live somewhere process-wide; it holds no configuration.
var std Generator

// NewV4 returns a random UUIDv4 in canonical lowercase form (36 characters).
//
// A random key is the simplest to produce and reveals nothing, but it carries no
// time: a consumer must remember every key for its whole retention window and can
// never tell a late retry from a new request. Prefer NewV7 when the consumer should be
// able to reject keys older than its window.
func NewV4() string {
	// crypto/rand never fails since Go 1.24, so neither does uuid.New with its
	// default reader.
	return uuid.New().String()
}

// NewV7 returns a UUIDv7 in canonical lowercase form (36 characters). It carries its
// creation time in milliseconds, so a consumer can reject it as stale once it is older
// than the retention window (see Stale), and keys sort by time, which keeps B-tree
// indexes on the key append-only.
//
// Keys from one process are strictly increasing, as strings too, even within one
// millisecond and if the clock steps back; it is safe for concurrent use.
func NewV7() string { return std.V7() }

// NewULID returns a ULID: 26 characters of Crockford base32, upper case, carrying its
// creation time in milliseconds like NewV7 but shorter, and easier to read aloud.
//
// Keys from one process are strictly increasing, even within one millisecond and if
// the clock steps back; it is safe for concurrent use.
func NewULID() string { return std.ULID() }

// Generator makes time-based keys from its own clock, so tests can pin the time a key
// carries. Each Generator keeps its own monotonic state: keys from one Generator are
// strictly increasing, but two Generators (or a Generator and NewV7) do not
// coordinate. The zero value uses time.Now and is safe for concurrent use; a Generator
// must not be copied after first use.
type Generator struct {
	// Now is the clock whose time the keys carry. Nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	v7      int64                  // last UUIDv7 time: Unix ms << 12 | sub-ms sequence
	ulidMS  uint64                 // last ULID millisecond
	entropy *ulid.MonotonicEntropy // created on first ULID
}

func (g *Generator) now() time.Time {
	if g.Now == nil {
		return time.Now()
	}
	return g.Now()
}

// V7 returns a UUIDv7 carrying g's clock; see NewV7.
//
// The 12 bits after the millisecond hold the sub-millisecond fraction of the clock
// (RFC 9562, section 6.2, method 3). When two calls would get the same value, the
// second takes the next one, so order is kept at any rate; under a sustained rate
// above 4096 keys per millisecond, or after the clock steps back, keys carry a time
// slightly ahead of the clock until it catches up.
func (g *Generator) V7() string {
	var u uuid.UUID
	_, _ = rand.Read(u[8:]) // never fails; outside the lock so callers wait less
	t := g.nextV7(g.now())
	ms := t >> 12
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = 0x70 | byte(t>>8)&0x0f // version 7
	u[7] = byte(t)
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u.String()
}

// nextV7 returns the next (ms << 12 | seq), strictly greater than the previous one.
func (g *Generator) nextV7(now time.Time) int64 {
	ms := now.UnixMilli()
	seq := int64(now.Nanosecond()%int(time.Millisecond)) >> 8 // 0..3906: the sub-ms fraction
	if ms < 0 || ms > maxMilli {
		ms, seq = clampMilli(ms), 0
	}
	t := ms<<12 | seq
	g.mu.Lock()
	if t <= g.v7 {
		t = g.v7 + 1
	}
	g.v7 = t
	g.mu.Unlock()
	return t
}

// ULID returns a ULID carrying g's clock; see NewULID.
//
// Within one millisecond the 80 random bits are incremented by a random amount
// (ulid.Monotonic). In the astronomically unlikely case that they overflow, or if the
// clock steps back, the key takes the next or the last millisecond instead.
func (g *Generator) ULID() string {
	ms := uint64(clampMilli(g.now().UnixMilli()))
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.entropy == nil {
		g.entropy = ulid.Monotonic(rand.Reader, 0)
	}
	ms = max(ms, g.ulidMS)
	for {
		id, err := ulid.New(ms, g.entropy)
		if err == nil {
			g.ulidMS = ms
			return id.String()
		}
		if !errors.Is(err, ulid.ErrMonotonicOverflow) || ms >= maxMilli {
			// Only a failing crypto/rand (fatal anyway since Go 1.24) or the year
			// 10889 get here. Fail loudly rather than return a key out of order.
			panic("idemkey: cannot make a ULID: " + err.Error())
		}
		ms++
	}
}

// clampMilli keeps a clock reading inside the 48 bits a UUIDv7 or ULID can carry.
func clampMilli(ms int64) int64 {
	return min(max(ms, 0), maxMilli)
}
