package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
)

// `idem sagas purge` deletes the finished sagas older than --older-than with
// their effects, and with --effects the other complete effects as old; a failed
// saga stays with its effects, and an age below an hour is refused.
func TestSagasPurge(t *testing.T) {
	t.Parallel()
	forEachOpsDB(t, true, func(t *testing.T, d opsDB) {
		ctx := context.Background()
		past := func() time.Time { return time.Now().Add(-2 * time.Hour) }
		declined := func(in saga.Input) error {
			if in.SagaID == "broken" {
				return effect.Permanent(errors.New("declined"))
			}
			return nil
		}
		def := saga.Definition{Name: "order", Steps: []saga.Step{
			{Name: "reserve", Action: func(context.Context, saga.Input) ([]byte, error) { return nil, nil },
				Compensate: func(_ context.Context, in saga.Input) error { return declined(in) }},
			{Name: "charge", NoCompensation: true,
				Action: func(_ context.Context, in saga.Input) ([]byte, error) { return nil, declined(in) }},
		}}
		o, err := saga.New(ctx, d.db, saga.Config{Now: past, Logger: slog.New(slog.DiscardHandler)}, def)
		if err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]string{"done": saga.Completed, "broken": saga.Failed} {
			if inst, err := o.Execute(ctx, "order", id, nil); err != nil || inst.State != want {
				t.Fatalf("saga %s: %+v, %v; want it %s", id, inst, err, want)
			}
		}
		f, err := effect.New(ctx, d.db, effect.Config{Now: past})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Do(ctx, "pay-1", "charge", func(context.Context, string) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		cmd := []string{"sagas", "purge", "--db", d.url}
		wantCode(t, 2, "--older-than 30m0s: use at least 1h0m0s", append(cmd, "--older-than", "30m")...)
		var got struct{ Sagas, Effects int }
		decode(t, mustRun(t, append(cmd, "--older-than", "3h", "--effects", "--json")...), &got)
		if got.Sagas != 0 || got.Effects != 0 {
			t.Fatalf("purge of what is older than 3h: %+v, want nothing", got)
		}
		decode(t, mustRun(t, append(cmd, "--older-than", "1h", "--effects", "--json")...), &got)
		if got.Sagas != 1 || got.Effects != 1 {
			t.Fatalf("purge of what is older than 1h: %+v, want saga done and effect pay-1", got)
		}
		var show sagaShowJSON
		decode(t, mustRun(t, "sagas", "show", "--db", d.url, "--id", "broken", "--json"), &show)
		if show.State != saga.Failed || len(show.Effects) != 3 {
			t.Fatalf("the failed saga after the purge: %+v, want it with its 3 effects", show)
		}
		wantCode(t, 3, "no saga", "sagas", "show", "--db", d.url, "--id", "done")
	})
}
