package effect_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/migrate"
)

// Admin lists effects by state, past their lease, by key, page by page, each once;
// Get returns one with its result and reason; bad input is an *idem.InputError.
func TestAdminListsAndPages(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		f := e.fence(t, effect.Config{})
		ok := func(context.Context, string) ([]byte, error) { return []byte("done"), nil }
		for i := range 5 {
			if _, err := f.Do(ctx, fmt.Sprint("k", i), "charge", ok); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.Do(ctx, "k1", "ship", ok); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Do(ctx, "f1", "charge", func(context.Context, string) ([]byte, error) {
			return nil, effect.Permanent(errors.New("card declined"))
		}); !errors.As(err, new(*effect.FailedError)) {
			t.Fatalf("permanent failure: %v", err)
		}
		// p1's call failed transiently: PENDING, its lease released (past).
		if _, err := f.Do(ctx, "p1", "charge", func(context.Context, string) ([]byte, error) { return nil, errors.New("timeout") }); err == nil {
			t.Fatal("the failing call succeeded")
		}
		// p2's worker died during its call, with a lease that has not passed.
		e.clock.Jump(time.Hour)
		crash(t, f, "p2", "charge", ok, true)

		a, err := effect.NewAdmin(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		list := func(flt effect.EffectFilter) []string {
			t.Helper()
			var got []string
			for pages := 0; ; pages++ {
				if pages > 20 {
					t.Fatalf("%+v: more than 20 pages", flt)
				}
				p, err := a.List(ctx, flt)
				if err != nil {
					t.Fatal(err)
				}
				if len(p.Effects) > flt.Limit {
					t.Fatalf("page of %d effects, limit %d", len(p.Effects), flt.Limit)
				}
				for _, ef := range p.Effects {
					got = append(got, ef.Key+"/"+ef.Step+":"+ef.State)
				}
				if p.Next == "" {
					return got
				}
				flt.Cursor = p.Next
			}
		}
		all := []string{"f1/charge:failed", "k0/charge:complete", "k1/charge:complete", "k1/ship:complete", "k2/charge:complete",
			"k3/charge:complete", "k4/charge:complete", "p1/charge:pending", "p2/charge:pending"}
		for _, limit := range []int{1, 2, 3, 1000} {
			if got := list(effect.EffectFilter{Limit: limit}); !slices.Equal(got, all) {
				t.Fatalf("every effect, %d a page:\n got %v\nwant %v", limit, got, all)
			}
		}
		for _, c := range []struct {
			flt  effect.EffectFilter
			want []string
		}{
			{effect.EffectFilter{State: effect.StatePending}, []string{"p1/charge:pending", "p2/charge:pending"}},
			{effect.EffectFilter{State: effect.StateFailed}, []string{"f1/charge:failed"}},
			{effect.EffectFilter{PastLease: true}, []string{"p1/charge:pending"}},
			{effect.EffectFilter{Key: "k1"}, []string{"k1/charge:complete", "k1/ship:complete"}},
			{effect.EffectFilter{Key: "k1", State: effect.StatePending}, nil},
		} {
			c.flt.Limit = 1
			if got := list(c.flt); !slices.Equal(got, c.want) {
				t.Errorf("%+v: %v, want %v", c.flt, got, c.want)
			}
		}

		got, err := a.Get(ctx, "f1", "charge")
		if err != nil || got.State != effect.StateFailed || got.Reason == "" || got.Attempts != 1 || got.Created.IsZero() {
			t.Fatalf("Get failed effect: %+v, %v", got, err)
		}
		if got, err := a.Get(ctx, "k1", "ship"); err != nil || string(got.Result) != "done" {
			t.Fatalf("Get complete effect: %+v, %v", got, err)
		}
		if _, err := a.Get(ctx, "nope", "charge"); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("Get of an unknown effect: %v, want idem.ErrNotFound", err)
		}
		for _, bad := range []effect.EffectFilter{
			{Limit: 0}, {Limit: 1001}, {Limit: 10, State: "complete"}, {Limit: 10, State: "failed", PastLease: true},
			{Limit: 10, Cursor: "not a cursor"}, {Limit: 10, Cursor: "YQ"},
		} {
			var ie *idem.InputError
			if _, err := a.List(ctx, bad); !errors.As(err, &ie) {
				t.Errorf("List(%+v) = %v, want an *idem.InputError", bad, err)
			}
		}
	})
}

// NewAdmin changes no schema: on a database without idem_effects it says so.
func TestAdminNeedsTheSchema(t *testing.T) {
	t.Parallel()
	_, err := effect.NewAdmin(context.Background(), sqltest.SQLite(t))
	if !errors.Is(err, migrate.ErrBehind) {
		t.Fatalf("NewAdmin on an empty database: %v, want migrate.ErrBehind", err)
	}
}
