package admin

import (
	"context"
	"errors"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/migrate"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/queue"
)

// ForSQL sets cfg's DeadLetters, Outbox, Effects, Sagas and Queue to the areas of db, one
// for each component whose tables db holds up to date; it changes no schema. The
// areas of components whose tables are missing or behind (run `idem migrate up`)
// are left as they were, and their names (areas of GET /api/) are returned in
// skipped, with why. err is a failure to read db's migrations.
func ForSQL[Tx any](ctx context.Context, db idemsql.TxDB[Tx], cfg *Config) (skipped map[string]error, err error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	skipped = map[string]error{}
	ready := func(area string, set migrate.Set) (bool, error) {
		err := migrate.Require(ctx, db, set)
		if errors.Is(err, migrate.ErrBehind) {
			skipped[area] = err
			return false, nil
		}
		return err == nil, err
	}
	if ok, err := ready(areaDeadLetters, migrate.Inbox); err != nil {
		return nil, err
	} else if ok {
		cfg.DeadLetters = DeadLettersFrom(inbox.NewDeadLetterAdmin(db))
	}
	if ok, err := ready(areaOutbox, migrate.Outbox); err != nil {
		return nil, err
	} else if ok {
		cfg.Outbox = OutboxFrom(outbox.NewAdmin(db))
	}
	if ok, err := ready(areaEffects, migrate.Effect); err != nil {
		return nil, err
	} else if ok {
		a, err := effect.NewAdmin(ctx, db)
		if err != nil {
			return nil, err
		}
		cfg.Effects = EffectsFrom(a)
	}
	// A saga's steps are effects: its area needs both.
	if ok, err := ready(areaSagas, migrate.Saga); err != nil {
		return nil, err
	} else if ok && cfg.Effects != nil {
		a, err := saga.NewAdmin(ctx, db)
		if err != nil {
			return nil, err
		}
		cfg.Sagas = SagasFrom(a)
	} else if ok {
		skipped[areaSagas] = skipped[areaEffects]
	}
	if ok, err := ready(areaQueue, migrate.Queue); err != nil {
		return nil, err
	} else if ok {
		q, err := queue.New(ctx, db, queue.Config{SkipMigrate: true})
		if err != nil {
			return nil, err
		}
		cfg.Queue = QueueFrom(q)
	}
	return skipped, nil
}
