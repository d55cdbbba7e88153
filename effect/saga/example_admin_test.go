package saga_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
)

// An operator finds a saga whose compensation failed, fixes the cause, and has
// the orchestrator run the compensation again.
func ExampleAdmin() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "saga-admin-example-")
	defer os.RemoveAll(dir)
	sq, err := idemsqlite.Open(ctx, filepath.Join(dir, "app.db"), idemsqlite.Config{})
	if err != nil {
		panic(err)
	}
	defer sq.Close()
	db, _ := idemsql.SQLDB(ctx, sq.DB())

	stockUp := false
	o, err := saga.New(ctx, db, saga.Config{}, saga.Definition{Name: "checkout", Steps: []saga.Step{{
		Name:   "reserve",
		Action: func(context.Context, saga.Input) ([]byte, error) { return nil, nil },
		Compensate: func(context.Context, saga.Input) error {
			if !stockUp {
				return effect.Permanent(errors.New("stock service: unknown reservation"))
			}
			return nil
		},
	}, {
		Name: "charge", NoCompensation: true,
		Action: func(context.Context, saga.Input) ([]byte, error) {
			return nil, effect.Permanent(errors.New("card declined"))
		},
	}}})
	if err != nil {
		panic(err)
	}
	_, _ = o.Start(ctx, "checkout", "order-42", nil)
	_, _ = o.RunOnce(ctx)

	admin, err := saga.NewAdmin(ctx, db) // in any process: the database is enough
	if err != nil {
		panic(err)
	}
	page, _ := admin.List(ctx, saga.Failed, "", 100)
	for _, s := range page.Sagas {
		fmt.Println(s.ID, s.State+":", s.Reason)
	}

	stockUp = true
	if err := admin.RetryStep(ctx, "order-42", "stock service fixed"); err != nil {
		panic(err)
	}
	_, _ = o.RunOnce(ctx)
	d, _ := admin.Get(ctx, "order-42")
	fmt.Println(d.ID, d.State)
	// Output:
	// order-42 failed: step charge failed: permanent: card declined; compensation of reserve failed: permanent: stock service: unknown reservation
	// order-42 compensated
}
