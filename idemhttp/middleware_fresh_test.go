package idemhttp_test

import (
	"context"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/idemtest"
)

// fakeClock is a clock tests move by hand: the server's (store and middleware)
// or a sender's, offset from it.
type fakeClock struct {
	base time.Time
	off  atomic.Int64
}

func newFakeClock() *fakeClock {
	return &fakeClock{base: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time          { return c.base.Add(time.Duration(c.off.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// skewed is a sender's clock: the server's, off by d.
func (c *fakeClock) skewed(d time.Duration) func() time.Time {
	return func() time.Time { return c.Now().Add(d) }
}

// freshTarget is one middleware over a real store, every clock on clock.
type freshTarget struct {
	name  string
	serve func(t *testing.T, clock *fakeClock, cfg idemhttp.Config, h http.Handler) string
}

var freshTargets = []freshTarget{
	{"memory", func(t *testing.T, clock *fakeClock, cfg idemhttp.Config, h http.Handler) string {
		cfg.Store = mwMust(idemmem.New(idemmem.Config{Now: clock.Now}))(t)
		return mwServe(t, cfg, h).URL
	}},
	{"sqlite", func(t *testing.T, clock *fakeClock, cfg idemhttp.Config, h http.Handler) string {
		s := mwMust(idemsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), idemsqlite.Config{Now: clock.Now}))(t)
		t.Cleanup(func() { s.Close() })
		cfg.Store = s
		return mwServe(t, cfg, h).URL
	}},
	{"atomic/sqlite", func(t *testing.T, clock *fakeClock, cfg idemhttp.Config, h http.Handler) string {
		s := mwMust(idemsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), idemsqlite.Config{Now: clock.Now}))(t)
		t.Cleanup(func() { s.Close() })
		db := mwMust(idemsql.SQLDB(context.Background(), s.DB()))(t)
		mw := mwMust(idemhttp.AtomicMiddleware(db, s, cfg))(t)
		return mwServeHandler(t, mw(h)).URL
	}},
}

// refusedMetric checks idem_http_refused_total{reason}.
func refusedMetric(t *testing.T, reg prometheus.Gatherer, reason string, want float64) {
	t.Helper()
	if got := idemtest.MetricValue(t, reg, "idem_http_refused_total", map[string]string{"reason": reason}); got != want {
		t.Errorf("idem_http_refused_total{reason=%q} = %v, want %v", reason, got, want)
	}
}

// A retry whose key is older than the retention is refused with 410, not run
// again, even after the store forgot the key; a retry inside the window replays.
func TestMiddlewareRefusesStaleKey(t *testing.T) {
	t.Parallel()
	const retention = time.Hour
	for _, tg := range freshTargets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			clock, reg := newFakeClock(), prometheus.NewRegistry()
			h := mwEcho(http.StatusCreated)
			url := tg.serve(t, clock, idemhttp.Config{Retention: retention, Now: clock.Now, Registerer: reg}, h)
			keys := &idemkey.Generator{Now: clock.Now}
			key := keys.V7()

			if r := mwDo(t, "POST", url+"/orders", key, []byte("a")); r.status != http.StatusCreated {
				t.Fatalf("first attempt: %d %s", r.status, r.body)
			}
			clock.Advance(retention - time.Minute) // inside the window: the stored answer
			if r := mwDo(t, "POST", url+"/orders", key, []byte("a")); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("retry inside the window: %d replayed=%q %s", r.status, r.header.Get(idemhttp.HeaderReplayed), r.body)
			}
			// Past the retention and the record's skew margin: the store has forgotten
			// the key, so only its age stops the handler from running again.
			clock.Advance(3 * time.Minute)
			r := mwDo(t, "POST", url+"/orders", key, []byte("a"))
			mwProblem(t, r, http.StatusGone, "longer than the 1h0m0s this server keeps keys")
			if got := h.runs.Load(); got != 1 {
				t.Fatalf("the handler ran %d times, want 1: a late retry ran again", got)
			}
			refusedMetric(t, reg, "stale_key", 1)
			mwMetric(t, reg, "rejected", 1)

			// MaxKeyAge negative: the check is off, and the late retry runs again
			// (the behaviour this check exists to prevent).
			url = tg.serve(t, clock, idemhttp.Config{Retention: retention, MaxKeyAge: -1, Now: clock.Now}, h)
			if r := mwDo(t, "POST", url+"/orders", key, []byte("a")); r.status != http.StatusCreated || h.runs.Load() != 2 {
				t.Fatalf("with MaxKeyAge < 0: %d, runs %d; want 201 and a second run", r.status, h.runs.Load())
			}
		})
	}
}

// A key dated beyond idemkey.MaxSkew ahead of the server is refused (400); one
// within it runs. An untimed key runs unless RequireTimedKeys.
func TestMiddlewareRefusesFutureAndUntimedKeys(t *testing.T) {
	t.Parallel()
	for _, tg := range freshTargets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			clock, reg := newFakeClock(), prometheus.NewRegistry()
			h := mwEcho(http.StatusCreated)
			url := tg.serve(t, clock, idemhttp.Config{Now: clock.Now, Registerer: reg, RequireTimedKeys: true}, h)

			ahead := (&idemkey.Generator{Now: clock.skewed(idemkey.MaxSkew + time.Second)}).V7()
			mwProblem(t, mwDo(t, "POST", url+"/a", ahead, nil), http.StatusBadRequest, "ahead of this server's clock")
			for _, key := range []string{idemkey.NewV4(), idemkey.Intent(idemkey.NewNamespace("t"), "x"), "order-17"} {
				mwProblem(t, mwDo(t, "POST", url+"/a", key, nil), http.StatusBadRequest, "not a UUIDv7 or ULID")
			}
			if got := h.runs.Load(); got != 0 {
				t.Fatalf("the handler ran %d times for refused keys", got)
			}
			refusedMetric(t, reg, "future_key", 1)
			refusedMetric(t, reg, "untimed_key", 3)

			within := (&idemkey.Generator{Now: clock.skewed(idemkey.MaxSkew - time.Second)}).ULID()
			if r := mwDo(t, "POST", url+"/a", within, nil); r.status != http.StatusCreated {
				t.Fatalf("a key within the skew allowance: %d %s", r.status, r.body)
			}
			// Without RequireTimedKeys an untimed key cannot be judged, and runs.
			url = tg.serve(t, clock, idemhttp.Config{Now: clock.Now}, h)
			if r := mwDo(t, "POST", url+"/a", idemkey.NewV4(), nil); r.status != http.StatusCreated || h.runs.Load() != 2 {
				t.Fatalf("an untimed key without RequireTimedKeys: %d, runs %d", r.status, h.runs.Load())
			}
		})
	}
}

// A request that arrives after its Idem-Deadline is not run (412); a malformed
// deadline is a 400 naming the header.
func TestMiddlewareHonoursDeadline(t *testing.T) {
	t.Parallel()
	for _, tg := range freshTargets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			clock, reg := newFakeClock(), prometheus.NewRegistry()
			h := mwEcho(http.StatusCreated)
			url := tg.serve(t, clock, idemhttp.Config{Now: clock.Now, Registerer: reg}, h)
			keys := &idemkey.Generator{Now: clock.Now}
			dl := func(d time.Duration) string {
				return idem.HeaderDeadline + ": " + idem.FormatDeadline(clock.Now().Add(d))
			}

			mwProblem(t, mwDo(t, "POST", url+"/a", keys.V7(), nil, dl(-time.Millisecond)), http.StatusPreconditionFailed, "arrived after its Idem-Deadline")
			mwProblem(t, mwDo(t, "POST", url+"/a", keys.V7(), nil, idem.HeaderDeadline+": soon"), http.StatusBadRequest, idem.HeaderDeadline)
			mwProblem(t, mwDo(t, "POST", url+"/a", keys.V7(), nil, dl(time.Minute), dl(time.Minute)), http.StatusBadRequest, "sent 2 times")
			if got := h.runs.Load(); got != 0 {
				t.Fatalf("the handler ran %d times for refused requests", got)
			}
			refusedMetric(t, reg, "deadline", 1)
			if r := mwDo(t, "POST", url+"/a", keys.V7(), nil, dl(0)); r.status != http.StatusCreated {
				t.Fatalf("a request at its deadline: %d %s", r.status, r.body)
			}
		})
	}
}

// A sender whose clock is off by less than idemkey.MaxSkew: ahead, its keys are
// accepted and its deadlines last that much longer on the server; behind, a
// deadline shorter than its lag has already passed when it arrives (412), which
// is what the documentation tells such a sender to expect.
func TestMiddlewareSkewedSender(t *testing.T) {
	t.Parallel()
	const skew, budget = 40 * time.Second, 10 * time.Second
	for _, tc := range []struct {
		name   string
		offset time.Duration
		status int
	}{{"ahead", skew, http.StatusCreated}, {"behind", -skew, http.StatusPreconditionFailed}, {"behind-long-budget", -skew, http.StatusCreated}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			h := mwEcho(http.StatusCreated)
			url := freshTargets[1].serve(t, clock, idemhttp.Config{Now: clock.Now}, h)
			sender := clock.skewed(tc.offset)
			b := budget
			if tc.name == "behind-long-budget" {
				b = skew + budget
			}
			key := (&idemkey.Generator{Now: sender}).V7()
			r := mwDo(t, "POST", url+"/a", key, nil, idem.HeaderDeadline+": "+idem.FormatDeadline(sender().Add(b)))
			if r.status != tc.status {
				t.Fatalf("sender %v off, budget %v: %d %s; want %d", tc.offset, b, r.status, r.body, tc.status)
			}
			want := int64(0)
			if tc.status == http.StatusCreated {
				want = 1
			}
			if got := h.runs.Load(); got != want {
				t.Fatalf("the handler ran %d times, want %d", got, want)
			}
		})
	}
}
