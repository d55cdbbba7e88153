package effect_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
)

// Admin lists and shows effects whose rows another service wrote by hand with the
// others, on every database; on SQLite, one with text where a number belongs is
// listed with its decode error.
func TestAdminListsUndecodableEffects(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		e.fence(t, effect.Config{}) // its table
		sqltest.Effect(t, e.db, "hand-1", "charge", 1)
		bad := map[string]string{}
		if e.db.Dialect() == idemsql.SQLite {
			sqltest.Effect(t, e.db, "hand-2", "charge", "seven")
			bad["hand-2"] = "token: "
		}
		sqltest.Effect(t, e.db, "hand-3", "charge", 3)
		a, err := effect.NewAdmin(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		for _, flt := range []effect.EffectFilter{{Limit: 1}, {State: effect.StatePending, Limit: 2}, {PastLease: true, Limit: 10}} {
			var seen []string
			for {
				page, err := a.List(ctx, flt)
				if err != nil {
					t.Fatalf("List(%+v): %v", flt, err)
				}
				for _, ef := range page.Effects {
					seen = append(seen, ef.Key)
					if !strings.HasPrefix(ef.DecodeError, bad[ef.Key]) || (bad[ef.Key] == "") != (ef.DecodeError == "") {
						t.Errorf("List(%+v): %s decode error %q", flt, ef.Key, ef.DecodeError)
					}
				}
				if flt.Cursor = page.Next; flt.Cursor == "" {
					break
				}
			}
			if want := 2 + len(bad); len(seen) != want {
				t.Errorf("List(%+v) = %v, want %d effects", flt, seen, want)
			}
		}
		for key := range bad {
			if ef, err := a.Get(ctx, key, "charge"); err != nil || !strings.HasPrefix(ef.DecodeError, bad[key]) {
				t.Errorf("Get(%s) = %+v, %v", key, ef, err)
			}
		}
	})
}
