package effect_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/effect"
)

// Two workers whose clocks disagree share one fence table. The fence takes its
// callers' clock (Config.Now, on every database): a lease ends when the reader's
// clock passes the lease_until the holder wrote on its own, so a worker D ahead
// reckons another's lease D shorter. Within the lease it waits; with D beyond the
// lease it takes a live worker's effect over at once and calls again under the
// same derived key: a downstream that honours keys charges once, one that ignores
// them twice, and the stalled worker's late COMPLETE is fenced either way.
func TestClockSkewBetweenWorkers(t *testing.T) {
	t.Parallel()
	const lease = time.Minute
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		for _, tc := range []struct {
			name        string
			skew        time.Duration // B ahead of A
			honourKeys  bool
			takeover    bool
			wantCharged int
		}{
			{"within_lease", lease / 2, false, false, 1},
			{"beyond_lease/downstream_ignores_keys", lease + lease/2, false, true, 2},
			{"beyond_lease/downstream_honours_keys", lease + lease/2, true, true, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPayments(t, tc.honourKeys)
				clockA, clockB := &chaos.Clock{}, &chaos.Clock{}
				clockA.Jump(-tc.skew / 2)
				clockB.Jump(tc.skew - tc.skew/2)
				fence := func(c *chaos.Clock) *effect.Fence[*sql.Tx] {
					f, err := effect.New(ctx, e.db, effect.Config{Lease: lease, Now: c.Now})
					if err != nil {
						t.Fatal(err)
					}
					return f
				}
				a, b := fence(clockA), fence(clockB)
				order := "order-" + tc.name

				// A charges, then stalls before COMPLETE, its lease live on its clock.
				charged, resume, late := make(chan struct{}), make(chan struct{}), make(chan error, 1)
				go func() {
					_, err := a.Do(ctx, order, "charge", func(ctx context.Context, key string) ([]byte, error) {
						out, err := p.charge(order)(ctx, key)
						close(charged)
						<-resume
						return out, err
					})
					late <- err
				}()
				<-charged
				_, err := b.Do(ctx, order, "charge", p.charge(order))
				n, rerr := b.Recover(ctx, "charge", 10, p.charge(order))
				close(resume)
				aerr := <-late
				if rerr != nil {
					t.Fatalf("B's Recover: %v", rerr)
				}
				if !tc.takeover {
					if !errors.Is(err, effect.ErrInProgress) || n != 0 || aerr != nil {
						t.Fatalf("B within A's lease: Do %v, Recover %d; A's COMPLETE %v; want ErrInProgress, 0 and nil", err, n, aerr)
					}
				} else if err != nil || !errors.Is(aerr, idem.ErrLeaseLost) {
					t.Fatalf("B %v ahead: takeover %v, A's late COMPLETE %v; want nil and ErrLeaseLost", tc.skew, err, aerr)
				}
				p.wantCharged(t, order, tc.wantCharged)
				if fx, ok, err := a.Get(ctx, order, "charge"); err != nil || !ok || fx.State != effect.StateComplete {
					t.Fatalf("the effect: %+v, %v, %v; want complete", fx, ok, err)
				}
			})
		}
	})
}
