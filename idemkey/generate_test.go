package idemkey_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/idemhq/idem/idemkey"
)

// fixedClock returns a Generator whose clock always reads t.
func fixedClock(t time.Time) *idemkey.Generator {
	return &idemkey.Generator{Now: func() time.Time { return t }}
}

// assertIncreasing fails unless keys are strictly increasing as strings.
func assertIncreasing(t *testing.T, keys []string) {
	t.Helper()
	for i := 1; i < len(keys); i++ {
		if keys[i] <= keys[i-1] {
			t.Fatalf("key %d %q is not greater than key %d %q", i, keys[i], i-1, keys[i-1])
		}
	}
}

func generate(n int, gen func() string) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = gen()
	}
	return keys
}

func TestNewV4(t *testing.T) {
	t.Parallel()
	a, b := idemkey.NewV4(), idemkey.NewV4()
	if a == b {
		t.Fatalf("two NewV4 keys are equal: %s", a)
	}
	for _, k := range []string{a, b} {
		u, err := uuid.Parse(k)
		if err != nil || len(k) != 36 || k != strings.ToLower(k) || u.Version() != 4 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("NewV4() = %q: want a canonical lowercase UUIDv4 (parse error %v)", k, err)
		}
	}
}

func TestMonotonic(t *testing.T) {
	t.Parallel()
	frozen := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	cases := []struct {
		name string
		gen  func() string
	}{
		{"NewV7", idemkey.NewV7},
		{"NewULID", idemkey.NewULID},
		{"V7 frozen clock", fixedClock(frozen).V7},
		{"ULID frozen clock", fixedClock(frozen).ULID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assertIncreasing(t, generate(100_000, tc.gen))
		})
	}
}

func TestMonotonicConcurrent(t *testing.T) {
	t.Parallel()
	for name, gen := range map[string]func() string{"V7": idemkey.NewV7, "ULID": idemkey.NewULID} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const goroutines, each = 16, 5_000
			results := make([][]string, goroutines)
			var wg sync.WaitGroup
			for g := range results {
				wg.Go(func() { results[g] = generate(each, gen) })
			}
			wg.Wait()
			seen := make(map[string]bool, goroutines*each)
			for _, keys := range results {
				assertIncreasing(t, keys) // each caller still sees its own keys in order
				for _, k := range keys {
					if seen[k] {
						t.Fatalf("duplicate key %s", k)
					}
					seen[k] = true
				}
			}
		})
	}
}

// Keys made faster than the clock ticks stay ordered, and carry the clock's time, or
// for UUIDv7 under a burst above 4096 per millisecond a time just ahead of it.
func TestFrozenClockTime(t *testing.T) {
	t.Parallel()
	frozen := time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC)
	const n = 10_000
	v7 := generate(n, fixedClock(frozen).V7)
	ulids := generate(n, fixedClock(frozen).ULID)
	if got := mustTime(t, v7[0]); !got.Equal(frozen) {
		t.Errorf("first V7 carries %v, want %v", got, frozen)
	}
	maxAhead := time.Duration(n/4096+1) * time.Millisecond
	if got := mustTime(t, v7[n-1]); got.Before(frozen) || got.Sub(frozen) > maxAhead {
		t.Errorf("V7 number %d carries %v, want within %v after %v", n, got, maxAhead, frozen)
	}
	for _, k := range []string{ulids[0], ulids[n-1]} {
		if got := mustTime(t, k); !got.Equal(frozen) {
			t.Errorf("ULID %s carries %v, want %v", k, got, frozen)
		}
	}
}

func TestClockStepsBack(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	readings := []time.Time{t0, t0.Add(-time.Second), t0.Add(time.Millisecond)}
	want := []time.Time{t0, t0, t0.Add(time.Millisecond)}
	for name, gen := range map[string]func(*idemkey.Generator) string{
		"V7": (*idemkey.Generator).V7, "ULID": (*idemkey.Generator).ULID,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			i := 0
			g := &idemkey.Generator{Now: func() time.Time { i++; return readings[i-1] }}
			keys := generate(len(readings), func() string { return gen(g) })
			assertIncreasing(t, keys)
			for i, k := range keys {
				if got := mustTime(t, k); !got.Equal(want[i]) {
					t.Errorf("key %d carries %v, want %v (clock read %v)", i, got, want[i], readings[i])
				}
			}
		})
	}
}

func TestTimeRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []struct{ clock, want time.Time }{
		{time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC), time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC)},
		{time.Date(2026, 3, 14, 15, 9, 26, 535_897_932, time.UTC), time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC)},
		{time.Date(2026, 3, 14, 16, 9, 26, 0, time.FixedZone("CET", 3600)), time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)},
		{time.Unix(0, 0), time.Unix(0, 0).UTC()},
		{time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC), time.Unix(0, 0).UTC()}, // clamped
	}
	for _, tc := range cases {
		for name, gen := range map[string]func() string{"V7": fixedClock(tc.clock).V7, "ULID": fixedClock(tc.clock).ULID} {
			k := gen()
			got, err := idemkey.Time(k)
			if err != nil || !got.Equal(tc.want) || got.Location() != time.UTC {
				t.Errorf("%s at %v: Time(%s) = %v, %v; want %v in UTC", name, tc.clock, k, got, err, tc.want)
			}
		}
	}
}

func mustTime(t *testing.T, key string) time.Time {
	t.Helper()
	got, err := idemkey.Time(key)
	if err != nil {
		t.Fatalf("Time(%q): %v", key, err)
	}
	return got
}
