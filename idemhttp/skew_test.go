package idemhttp_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsqlite"
)

// skewGateways starts two gateways on one store: A on true time + ahead, B on true
// time − behind. With serverClock the store keeps its own clock, true time (as
// Postgres, MySQL and Redis do: their callers' clocks do not enter the record);
// otherwise each gateway has its own handle on one SQLite file that reads its
// gateway's clock (Config.Now), as two processes would.
func skewGateways(t *testing.T, clock *fakeClock, serverClock bool, ahead, behind time.Duration, cfg idemhttp.Config, h http.Handler) (a, b string) {
	t.Helper()
	nowA, nowB := clock.skewed(ahead), clock.skewed(-behind)
	var storeA, storeB idem.Store
	if serverClock {
		storeA = mwMust(idemmem.New(idemmem.Config{Now: clock.Now}))(t)
		storeB = storeA
	} else {
		path := filepath.Join(t.TempDir(), "idem.db")
		for _, s := range []struct {
			to  *idem.Store
			now func() time.Time
		}{{&storeA, nowA}, {&storeB, nowB}} {
			st := mwMust(idemsqlite.Open(context.Background(), path, idemsqlite.Config{Now: s.now}))(t)
			t.Cleanup(func() { st.Close() })
			*s.to = st
		}
	}
	cfg.Store, cfg.Now = storeA, nowA
	a = mwServe(t, cfg, h).URL
	cfg.Store, cfg.Now = storeB, nowB
	b = mwServe(t, cfg, h).URL
	return a, b
}

// Two gateways whose clocks disagree judge the same timed keys. A client (on true
// time) sends a key to A, then retries it at both gateways every minute until
// long after every record and window has ended. The stale-key refusal keeps a
// retry from running again while each gateway's clock is within idemkey.MaxSkew of
// the clock that keeps the record (the store's: the server's, or on a store that
// takes its callers' clock, the gateway's own). A gateway further behind a server
// clock refuses fresh keys as from the future, but accepts the key later, for
// longer than the store keeps it: the retry runs twice.
func TestGatewaysWithSkewedClocks(t *testing.T) {
	t.Parallel()
	const retention = time.Hour
	// Just within: a gateway exactly MaxSkew behind a server clock accepts a key
	// exactly MaxKeyAge old at the very instant the store forgets it.
	within := idemkey.MaxSkew - time.Second
	beyond := idemkey.MaxSkew + 10*time.Minute
	for _, tc := range []struct {
		name          string
		serverClock   bool
		ahead, behind time.Duration
		freshAtB      int // B's answer to a key minted on true time at once
		wantRuns      int64
	}{
		{"server_clock/within_MaxSkew", true, within, within, http.StatusCreated, 1},
		{"server_clock/B_behind_beyond_MaxSkew", true, beyond, beyond, http.StatusBadRequest, 2},
		{"caller_clock/within_MaxSkew", false, within, within, http.StatusCreated, 1},
		{"caller_clock/beyond_MaxSkew", false, beyond, beyond, http.StatusBadRequest, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			h := mwEcho(http.StatusCreated)
			a, b := skewGateways(t, clock, tc.serverClock, tc.ahead, tc.behind, idemhttp.Config{Retention: retention}, h)
			keys := &idemkey.Generator{Now: clock.Now}

			// A fresh key: A (ahead) runs it; B answers as its clock allows.
			if r := mwDo(t, "POST", b+"/orders", keys.V7(), []byte("b")); r.status != tc.freshAtB {
				t.Fatalf("a fresh key at B, %v behind: %d %s; want %d", tc.behind, r.status, r.body, tc.freshAtB)
			}
			h.runs.Store(0)
			key := keys.V7()
			if r := mwDo(t, "POST", a+"/orders", key, []byte("a")); r.status != http.StatusCreated {
				t.Fatalf("the first attempt at A, %v ahead: %d %s", tc.ahead, r.status, r.body)
			}
			var last [2]int
			end := retention + idemkey.MaxSkew + tc.ahead + tc.behind + 10*time.Minute
			for elapsed := time.Duration(0); elapsed <= end; elapsed += time.Minute {
				for i, gw := range []string{a, b} {
					r := mwDo(t, "POST", gw+"/orders", key, []byte("a"))
					last[i] = r.status
					switch {
					case r.status == http.StatusCreated, r.status == http.StatusGone, r.status == http.StatusBadRequest:
					default:
						t.Fatalf("retry after %v: %d %s", elapsed, r.status, r.body)
					}
				}
				clock.Advance(time.Minute)
			}
			if last != [2]int{http.StatusGone, http.StatusGone} {
				t.Errorf("long after its window, the key's retries at A and B answered %v, want 410 at both", last)
			}
			if got := h.runs.Load(); got != tc.wantRuns {
				t.Fatalf("the handler ran %d times for one key, want %d", got, tc.wantRuns)
			}
		})
	}
}
