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

// A checkout reserves stock, then charges the card. The card is declined (a
// permanent failure), so the saga turns around: the reservation is released and
// the saga ends compensated, with the reason.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "saga-example-")
	defer os.RemoveAll(dir)
	sq, err := idemsqlite.Open(ctx, filepath.Join(dir, "app.db"), idemsqlite.Config{})
	if err != nil {
		panic(err)
	}
	defer sq.Close()
	db, _ := idemsql.SQLDB(ctx, sq.DB())

	checkout := saga.Definition{Name: "checkout", Steps: []saga.Step{{
		Name: "reserve",
		Action: func(ctx context.Context, in saga.Input) ([]byte, error) {
			fmt.Println("reserve stock for", string(in.Data))
			return []byte("rsv-7"), nil
		},
		Compensate: func(ctx context.Context, in saga.Input) error {
			fmt.Println("release reservation", string(in.Results["reserve"]))
			return nil
		},
	}, {
		Name: "charge",
		Action: func(ctx context.Context, in saga.Input) ([]byte, error) {
			fmt.Println("charge card for", string(in.Data))
			return nil, effect.Permanent(errors.New("card declined"))
		},
		// Not called here: a step that failed permanently did not happen. A step
		// that ran out of attempts on timeouts may have, and is compensated.
		Compensate: func(ctx context.Context, in saga.Input) error {
			fmt.Println("refund charge")
			return nil
		},
	}}}
	o, err := saga.New(ctx, db, saga.Config{}, checkout)
	if err != nil {
		panic(err)
	}

	started, _ := o.Start(ctx, "checkout", "order-42", []byte("order-42"))
	again, _ := o.Start(ctx, "checkout", "order-42", []byte("order-42")) // a retried Start
	fmt.Println("started:", started, again)
	for { // in a service: go o.Run(ctx)
		n, err := o.RunOnce(ctx)
		if err != nil {
			panic(err)
		}
		if n == 0 {
			break
		}
	}
	inst, _, _ := o.Get(ctx, "order-42")
	fmt.Println(inst.State, "-", inst.Reason)
	// Output:
	// started: true false
	// reserve stock for order-42
	// charge card for order-42
	// release reservation rsv-7
	// compensated - step charge failed: permanent: card declined
}
