package effect_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/sqltest"
)

// calls records the effects a recovery called, by key (step charge), and fails
// those whose key says "fail".
type calls struct {
	mu     sync.Mutex
	called map[string]int
}

func (c *calls) call(_ context.Context, derived string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := derived
	for _, k := range []string{"fail-1", "fail-2", "fail-3", "good-1", "good-2"} {
		if idemkey.Derive(k, "charge") == derived {
			key = k
		}
	}
	c.called[key]++
	if strings.HasPrefix(key, "fail") {
		return nil, errors.New("service unavailable")
	}
	return []byte("ok"), nil
}

// recovered reports whether every effect of keys (step charge) is complete.
func recovered(t *testing.T, f *effect.Fence[*sql.Tx], keys ...string) bool {
	t.Helper()
	for _, k := range keys {
		e, ok, err := f.Get(context.Background(), k, "charge")
		if err != nil || !ok {
			t.Fatalf("Get(%s): %v, %v", k, ok, err)
		}
		if e.State != effect.StateComplete {
			return false
		}
	}
	return true
}

// recoverRounds runs Recover, limit effects a round, until the effects of keys
// are complete, and returns the errors of the rounds. It gives up after 6 rounds.
func recoverRounds(t *testing.T, f *effect.Fence[*sql.Tx], limit int, c *calls, keys ...string) []error {
	t.Helper()
	var errs []error
	for round := 0; !recovered(t, f, keys...); round++ {
		if round == 6 {
			t.Fatalf("after 6 rounds of Recover: %v not all recovered; the rounds' errors: %v", keys, errs)
		}
		_, err := f.Recover(context.Background(), "charge", limit, c.call)
		errs = append(errs, err)
	}
	return errs
}

// Effects whose recovery keeps failing, due first and as many as a batch, do not
// stop the recovery of the others: each failed one waits behind the effects due.
func TestRecoverGoesPastFailures(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		f := e.fence(t, effect.Config{})
		ok := func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }
		for _, k := range []string{"fail-1", "fail-2", "fail-3", "good-1", "good-2"} {
			crash(t, f, k, "charge", ok, false) // each worker died in its call
			e.clock.Jump(time.Millisecond)
		}
		e.clock.Jump(time.Hour) // every lease has passed
		c := &calls{called: map[string]int{}}
		errs := recoverRounds(t, f, 3, c, "good-1", "good-2")
		if len(errs) == 0 || errs[0] == nil || !strings.Contains(errs[0].Error(), "3 of the 3 effects of step charge") ||
			!strings.Contains(errs[0].Error(), "service unavailable") {
			t.Errorf("the first round's error = %v, want it to count the 3 failures and wrap the first", errs)
		}
		if c.called["good-1"] != 1 || c.called["good-2"] != 1 {
			t.Errorf("calls %v, want each good effect called once", c.called)
		}
	})
}

// On SQLite, which keeps any value in any column, an effect whose token another
// service wrote as text cannot be taken over; it does not stop the recovery of
// the others, and the operator's list shows it with its decode error.
func TestRecoverPastUndecodableEffect(t *testing.T) {
	t.Parallel()
	e := env{"sqlite", sqltest.SQLite(t), &chaos.Clock{}}
	ctx := context.Background()
	f := e.fence(t, effect.Config{})
	sqltest.Effect(t, e.db, "bad-1", "charge", "seven") // lease at the epoch: due first
	ok := func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }
	for _, k := range []string{"good-1", "good-2"} {
		crash(t, f, k, "charge", ok, false)
	}
	e.clock.Jump(time.Hour)
	c := &calls{called: map[string]int{}}
	errs := recoverRounds(t, f, 1, c, "good-1", "good-2")
	if len(errs) == 0 || errs[0] == nil || !strings.Contains(errs[0].Error(), `"token"`) {
		t.Errorf("the rounds' errors = %v, want the first to name the bad row's token", errs)
	}
	a, err := effect.NewAdmin(ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	page, err := a.List(ctx, effect.EffectFilter{Limit: 10})
	if err != nil || len(page.Effects) != 3 {
		t.Fatalf("List = %+v, %v; want the 3 effects", page, err)
	}
	for _, ef := range page.Effects {
		if bad := ef.Key == "bad-1"; bad != strings.HasPrefix(ef.DecodeError, "token: ") || (bad && ef.Reason != "written by hand") {
			t.Errorf("listed %+v: want only bad-1 with a decode error on its token, and what could be read", ef)
		}
	}
	one, err := a.Get(ctx, "bad-1", "charge")
	if err != nil || !strings.HasPrefix(one.DecodeError, "token: ") || one.State != effect.StatePending {
		t.Errorf("Get(bad-1) = %+v, %v; want it with its decode error", one, err)
	}
}
