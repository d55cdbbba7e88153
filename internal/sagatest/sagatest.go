// Package sagatest parks sagas as the orchestrators do, for the tests of the
// operator views (the admin API, the console, idem sagas).
package sagatest

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"

	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
)

// Park writes sagas ids by hand, as another service would (a saga "order" due at
// once, whose results are not JSON), and runs over db one round of an orchestrator
// of "order" (two steps that do nothing), which parks them. It makes the schema of
// sagas and effects if needed.
func Park(t testing.TB, db idemsql.TxDB[*sql.Tx], ids ...string) {
	t.Helper()
	ctx := context.Background()
	noop := func(context.Context, saga.Input) ([]byte, error) { return nil, nil }
	o, err := saga.New(ctx, db, saga.Config{Logger: slog.New(slog.DiscardHandler)}, saga.Definition{Name: "order", Steps: []saga.Step{
		{Name: "reserve", Action: noop, NoCompensation: true}, {Name: "charge", Action: noop, NoCompensation: true}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		sqltest.Saga(t, db, id, saga.Running, `not json`, 0)
	}
	if _, err := o.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
}

// ParkWithSteps parks saga id (Park) and writes its step effects by hand: do:reserve
// pending, and on SQLite do:charge with text in its token, which cannot be decoded.
// It reports whether it wrote do:charge.
func ParkWithSteps(t testing.TB, db idemsql.TxDB[*sql.Tx], id string) (undecodable bool) {
	t.Helper()
	Park(t, db, id)
	sqltest.Effect(t, db, id, "do:reserve", 1)
	if db.Dialect() != idemsql.SQLite {
		return false
	}
	sqltest.Effect(t, db, id, "do:charge", "seven")
	return true
}
