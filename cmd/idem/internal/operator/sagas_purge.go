package operator

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/migrate"
)

// sagasPurgeAction is `idem sagas purge`: the finished sagas older than
// --older-than go, each with its step effects; with --effects, the complete
// effects older than it too.
func (m *Cmd) sagasPurgeAction(o *sagasOptions) opsAction {
	return opsAction{"purge", func(fs *flag.FlagSet) {
		fs.DurationVar(&o.olderThan, "older-than", 0, fmt.Sprintf("delete finished sagas last changed longer ago than this, at least %v (such as 720h)", admin.MinPurgeAge))
		fs.BoolVar(&o.effects, "effects", false, "also delete the complete effects last changed longer ago")
	}, func(ctx context.Context) error { return m.sagasPurge(ctx, *o) }}
}

func (m *Cmd) sagasPurge(ctx context.Context, o sagasOptions) error {
	if o.olderThan < admin.MinPurgeAge {
		return m.usagef("sagas purge", "--older-than %v: use at least %v, so what a caller may still retry is kept", o.olderThan, admin.MinPurgeAge)
	}
	db, closeDB, err := m.openOpsDB(ctx, "sagas purge", o.db, migrate.Saga, migrate.Effect)
	if err != nil {
		return err
	}
	defer closeDB()
	sa, err := saga.NewAdmin(ctx, db)
	if err != nil {
		return err
	}
	out := struct {
		Sagas   int  `json:"sagas"`
		Effects *int `json:"effects,omitempty"`
	}{}
	if out.Sagas, err = sa.Purge(ctx, o.olderThan); err != nil {
		return badInput(err)
	}
	what := fmt.Sprintf("deleted %d finished sagas", out.Sagas)
	if o.effects {
		ea, err := effect.NewAdmin(ctx, db)
		if err != nil {
			return err
		}
		n, err := ea.Purge(ctx, o.olderThan)
		if err != nil {
			return badInput(err)
		}
		out.Effects = &n
		what += fmt.Sprintf(" and %d complete effects", n)
	}
	if o.json {
		return writeJSON(m.Stdout, out)
	}
	_, err = fmt.Fprintf(m.Stdout, "%s last changed before %s\n", what, time.Now().Add(-o.olderThan).UTC().Format(time.RFC3339))
	return err
}
