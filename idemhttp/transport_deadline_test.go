package idemhttp_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemmem"
)

// Every attempt carries the same Idem-Deadline: the context's deadline when it
// has one, else the retry budget's end; a deadline the caller set is kept.
func TestTransportSetsDeadline(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	srv := newTrServer(t, func(w http.ResponseWriter, r *http.Request, n int, _ []byte) {
		mu.Lock()
		seen = append(seen, r.Header.Get(idem.HeaderDeadline))
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		s := seen
		seen = nil
		return s
	}
	parse := func(v string) time.Time {
		t.Helper()
		d, err := idem.ParseDeadline(v)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	sameOnEach := func(got []string) string {
		t.Helper()
		if len(got) != 3 || got[0] == "" || got[1] != got[0] || got[2] != got[0] {
			t.Fatalf("deadlines of 3 attempts: %q, want one value on each", got)
		}
		return got[0]
	}
	client := trClient(t, &idemhttp.Transport{MaxElapsed: 10 * time.Minute})

	// The context's deadline.
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(5*time.Minute).Truncate(time.Second))
	defer cancel()
	want, _ := ctx.Deadline()
	if resp, _, err := trDo(t, client, trRequest(t, ctx, "POST", srv.URL, strings.NewReader("x"))); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("%v %v", resp, err)
	}
	if got := parse(sameOnEach(take())); !got.Equal(want) {
		t.Errorf("deadline %v, want the context's %v (it comes before the retry budget's end)", got, want)
	}

	// No context deadline: first attempt + MaxElapsed + 1 min.
	before := time.Now()
	if resp, _, err := trDo(t, client, trRequest(t, t.Context(), "POST", srv.URL, strings.NewReader("x"))); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("%v %v", resp, err)
	}
	after := time.Now()
	got := parse(sameOnEach(take()))
	if lo, hi := before.Add(11*time.Minute), after.Add(11*time.Minute); got.Before(lo) || got.After(hi) {
		t.Errorf("deadline %v, want between %v and %v (start + MaxElapsed + 1m)", got, lo, hi)
	}

	// The caller's own header wins.
	mine := idem.FormatDeadline(time.Now().Add(5 * time.Minute))
	req := trRequest(t, t.Context(), "POST", srv.URL, strings.NewReader("x"))
	req.Header.Set(idem.HeaderDeadline, mine)
	if resp, _, err := trDo(t, client, req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("%v %v", resp, err)
	}
	if v := sameOnEach(take()); v != mine {
		t.Errorf("deadline %q, want the caller's %q", v, mine)
	}
}

// The middleware's refusals reach the caller after one attempt: retrying the same
// key and deadline cannot succeed.
func TestTransportDoesNotRetryRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		status  int
		problem string
		key     func(now func() time.Time) string
		// serverAhead is how far the server's clock is ahead of the client's.
		serverAhead time.Duration
		timeout     time.Duration
	}{
		{"stale key", http.StatusGone, idemhttp.ProblemKeyExpired,
			func(now func() time.Time) string {
				return (&idemkey.Generator{Now: func() time.Time { return now().Add(-2 * time.Hour) }}).V7()
			}, 0, 0},
		{"untimed key", http.StatusBadRequest, idemhttp.ProblemUntimedKey,
			func(func() time.Time) string { return idemkey.NewV4() }, 0, 0},
		// The client's context ends in an hour; the server's clock reads two hours
		// later, as if the request arrived late.
		{"deadline passed", http.StatusPreconditionFailed, idemhttp.ProblemDeadlinePassed,
			func(func() time.Time) string { return idemkey.NewV7() }, 2 * time.Hour, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{base: time.Now().Add(tc.serverAhead)}
			h := mwEcho(http.StatusCreated)
			store := mwMust(idemmem.New(idemmem.Config{Now: clock.Now}))(t)
			srv := mwServe(t, idemhttp.Config{Store: store, Now: clock.Now, Retention: time.Hour, RequireTimedKeys: true}, h)
			ctx, cancel := t.Context(), context.CancelFunc(func() {})
			if tc.timeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
			}
			defer cancel()
			client := trClient(t, &idemhttp.Transport{NewKey: func(*http.Request) string { return tc.key(time.Now) }})
			resp, body, err := trDo(t, client, trRequest(t, ctx, "POST", srv.URL, strings.NewReader("x")))
			if err != nil || resp.StatusCode != tc.status || !strings.Contains(body, tc.problem) {
				t.Fatalf("%v %v %s; want %d %s", resp, err, body, tc.status, tc.problem)
			}
			if n := idemhttp.Attempts(resp); n != 1 {
				t.Errorf("Attempts = %d, want 1: a refusal was retried", n)
			}
			if n := h.runs.Load(); n != 0 {
				t.Errorf("the handler ran %d times for a refused request", n)
			}
		})
	}
}
