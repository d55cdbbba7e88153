package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
)

// purgingEffects is an Effects area that can purge, recording the age asked for.
type purgingEffects struct {
	admin.Effects
	age time.Duration
}

func (p *purgingEffects) Purge(_ context.Context, olderThan time.Duration) (int, error) {
	p.age = olderThan
	return 12, nil
}

// A purge needs the full-access token, an age of at least MinPurgeAge and a
// reason, which the audit records; an area that cannot purge answers 501.
func TestPurge(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	wantProblem(t, b.do(t, "POST", "/api/effects/purge", fullToken, `{"older_than":"720h","reason":"shrink"}`),
		501, admin.ProblemNotImplemented, "cannot purge")

	p := &purgingEffects{Effects: b.ef}
	b = setup(t, func(c *admin.Config) { c.Effects = p })
	wantProblem(t, b.do(t, "POST", "/api/effects/purge", readToken, `{"older_than":"720h","reason":"shrink"}`), 403, admin.ProblemForbidden)
	for body, detail := range map[string]string{
		`{"older_than":"720h"}`:                  "reason is empty",
		`{"older_than":"30m","reason":"shrink"}`: "older_than is 30m0s: send at least 1h0m0s",
		`{"older_than":"soon","reason":"x"}`:     `older_than is "soon", not a duration`,
		`{"reason":"shrink"}`:                    `older_than is "", not a duration`,
		`{"older_than":"720h","why":"x"}`:        "body",
	} {
		wantProblem(t, b.do(t, "POST", "/api/effects/purge", fullToken, body), 400, admin.ProblemInvalid, detail)
	}
	if p.age != 0 {
		t.Fatalf("a refused purge reached the area (age %v)", p.age)
	}
	var got admin.Purged
	wantJSON(t, b.do(t, "POST", "/api/effects/purge", fullToken, `{"older_than":"720h","reason":"the table is too big"}`), &got)
	if got != (admin.Purged{Deleted: 12, Complete: true}) || p.age != 720*time.Hour {
		t.Fatalf("purge = %+v with age %v; want 12 deleted, complete, 720h", got, p.age)
	}
	recs := b.auditRecords(t)
	last := recs[len(recs)-1]
	if last["why"] != "the table is too big" || last["route"] != "POST /api/effects/purge" ||
		last["what"].(map[string]any)["older_than"] != "720h0m0s" {
		t.Errorf("purge audit %v", last)
	}
}

// On real databases, the purges delete finished effects and sagas older than the
// age and keep the rest: a failed saga and its effects, a pending effect.
func TestPurgeReal(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		past := func() time.Time { return time.Now().Add(-2 * time.Hour) } // rows two hours old
		// Saga "broken" fails: its charge is declined and undoing its reservation too.
		declined := func(in saga.Input) error {
			if in.SagaID == "broken" {
				return effect.Permanent(errors.New("declined"))
			}
			return nil
		}
		def := saga.Definition{Name: "order", Steps: []saga.Step{
			{Name: "reserve", Action: func(context.Context, saga.Input) ([]byte, error) { return []byte("ok"), nil },
				Compensate: func(_ context.Context, in saga.Input) error { return declined(in) }},
			{Name: "charge", NoCompensation: true,
				Action: func(_ context.Context, in saga.Input) ([]byte, error) { return []byte("ok"), declined(in) }},
		}}
		o, err := saga.New(ctx, b.db, saga.Config{Now: past}, def)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"done", "broken"} {
			if _, err := o.Execute(ctx, "order", id, nil); err != nil {
				t.Fatal(err)
			}
		}
		f, err := effect.New(ctx, b.db, effect.Config{Now: past})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Do(ctx, "pay-1", "charge", func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Do(ctx, "pay-2", "charge", func(context.Context, string) ([]byte, error) { return nil, errors.New("timeout") }); err == nil {
			t.Fatal("a transient failure returned no error")
		}
		var cfg admin.Config
		if _, err := admin.ForSQL(ctx, b.db, &cfg); err != nil {
			t.Fatal(err)
		}
		a := newAPI(t, cfg)
		var got admin.Purged
		wantJSON(t, a.do("POST", "/api/sagas/purge", `{"older_than":"3h","reason":"nothing is that old"}`), &got)
		if got.Deleted != 0 || !got.Complete {
			t.Fatalf("purge of sagas older than 3h = %+v, want none", got)
		}
		wantJSON(t, a.do("POST", "/api/sagas/purge", `{"older_than":"1h","reason":"monthly cleanup"}`), &got)
		if got.Deleted != 1 || !got.Complete {
			t.Fatalf("purge of sagas = %+v, want the completed one", got)
		}
		wantJSON(t, a.do("POST", "/api/effects/purge", `{"older_than":"1h","reason":"monthly cleanup"}`), &got)
		if got.Deleted != 1 || !got.Complete {
			t.Fatalf("purge of effects = %+v, want pay-1 only", got)
		}
		wantProblem(t, a.do("GET", "/api/sagas/done", ""), 404, admin.ProblemNotFound)
		var d admin.SagaDetail
		wantJSON(t, a.do("GET", "/api/sagas/broken", ""), &d)
		if d.State != saga.Failed || len(d.Steps) != 3 {
			t.Fatalf("saga broken after the purges: %+v, want it failed with its 3 effects", d)
		}
		ea, err := effect.NewAdmin(ctx, b.db)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range [][2]string{{"pay-2", "charge"}, {"broken", "do:reserve"}} {
			if _, err := ea.Get(ctx, k[0], k[1]); err != nil {
				t.Errorf("effect %s/%s after the purges: %v, want it kept", k[0], k[1], err)
			}
		}
		if _, err := ea.Get(ctx, "pay-1", "charge"); err == nil {
			t.Error("effect pay-1/charge is still there after the purge")
		}
	})
}
