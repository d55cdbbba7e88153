package effect_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
)

const hbLease = 300 * time.Millisecond

// A live holder keeps its effect: a call that runs for several leases is not taken
// over by a concurrent Do or by Recover, and its result is recorded once.
//
// The lease clock is a chaos.Clock the test moves past each lease; the heartbeat
// must renew against it before anyone else tries: no timing is asserted.
func TestLiveHolderKeepsItsLease(t *testing.T) {
	sqltest.ForEachDB(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		ctx := context.Background()
		clock := &chaos.Clock{}
		f, err := effect.New(ctx, db, effect.Config{Lease: hbLease, Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int32
		started, release := make(chan struct{}), make(chan struct{})
		slow := func(context.Context, string) ([]byte, error) {
			if calls.Add(1) == 1 {
				close(started)
				<-release
			}
			return []byte("charged"), nil
		}
		type done struct {
			result []byte
			err    error
		}
		first := make(chan done, 1)
		go func() {
			r, err := f.Do(ctx, "order-1", "charge", slow)
			first <- done{r, err}
		}()
		<-started

		for lease := range 4 {
			clock.Jump(hbLease + time.Millisecond) // the lease as taken has passed
			testsvc.Eventually(t, 20*time.Second, "the holder renewed its lease", func() bool {
				e, ok, err := f.Get(ctx, "order-1", "charge")
				return err == nil && ok && e.LeaseUntil.After(clock.Now())
			})
			if _, err := f.Do(ctx, "order-1", "charge", slow); !errors.Is(err, effect.ErrInProgress) {
				t.Fatalf("lease %d: a concurrent Do = %v, want ErrInProgress", lease, err)
			}
			if n, err := f.Recover(ctx, "charge", 10, slow); n != 0 || err != nil {
				t.Fatalf("lease %d: Recover = %d, %v; want nothing taken over", lease, n, err)
			}
		}
		close(release)
		got := <-first
		if got.err != nil || string(got.result) != "charged" {
			t.Fatalf("the holder's Do = %q, %v; want its result", got.result, got.err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("the call ran %d times, want once", n)
		}
		e, _, err := f.Get(ctx, "order-1", "charge")
		if err != nil || e.State != effect.StateComplete || string(e.Result) != "charged" || e.Token != 1 {
			t.Errorf("stored %+v, %v; want complete with the result, token 1", e, err)
		}
		if r, err := f.Do(ctx, "order-1", "charge", slow); err != nil || string(r) != "charged" || calls.Load() != 1 {
			t.Errorf("a later Do = %q, %v (calls %d); want the stored result without a call", r, err, calls.Load())
		}
	})
}

// A holder whose effect was taken over while it was cut off stops renewing, says
// so in the log, and its result is refused (idem.ErrLeaseLost).
func TestFencedHolderStopsRenewing(t *testing.T) {
	sqltest.ForEachDB(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		ctx := context.Background()
		var mu sync.Mutex
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
		f, err := effect.New(ctx, db, effect.Config{Lease: hbLease, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		started, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := f.Do(ctx, "order-2", "charge", func(context.Context, string) ([]byte, error) {
				close(started)
				<-release
				return []byte("late"), nil
			})
			first <- err
		}()
		<-started
		// Another worker took over (what a takeover after an expired lease writes).
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := db.Querier(tx).Exec(ctx, `UPDATE idem_effects SET token = token + 1 WHERE key = $1 AND step = $2`, "order-2", "charge")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		testsvc.Eventually(t, 20*time.Second, "the holder logged its lost lease", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return bytes.Contains(logs.Bytes(), []byte("lease lost"))
		})
		close(release)
		if err := <-first; !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("the fenced holder's Do = %v, want idem.ErrLeaseLost", err)
		}
		if e, _, _ := f.Get(ctx, "order-2", "charge"); e.State != effect.StatePending {
			t.Errorf("stored state %q, want pending: the new holder records the effect", e.State)
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
