package idemsqlite_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
)

// holdWriteLock begins a business transaction on s's file, which takes the write lock
// (_txlock=immediate) and so stalls the group-commit writer until release is called.
func holdWriteLock(t *testing.T, s *idemsqlite.Store) (release func()) {
	t.Helper()
	tx, err := s.DB().BeginTx(ctxFor(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback() }) }
	t.Cleanup(release)
	return release
}

// A claim whose context ends while it waits in the queue returns the context's error
// and is never applied, even after the writer gets going again.
func TestQueuedClaimCancelledIsNotApplied(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, idemsqlite.Config{})
	k := idem.Key{Scope: "s", ID: "k"}
	release := holdWriteLock(t, s)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.Claim(ctx, idem.Claim{Key: k}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim stalled behind a business transaction = %v, want context.DeadlineExceeded", err)
	}
	release()
	res, err := s.Claim(ctxFor(t), idem.Claim{Key: k})
	if err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("claim after the cancelled one = %v, %v; want Acquired (the cancelled claim must not be applied)", res.Outcome, err)
	}
}

// An op that fails on its own data (here a trigger rejects one key) gets its error;
// the others queued in the same group still commit.
func TestGroupSurvivesOneFailingOp(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, idemsqlite.Config{})
	ctx := ctxFor(t)
	if _, err := s.DB().ExecContext(ctx, `CREATE TRIGGER poison BEFORE INSERT ON idem_records
		WHEN NEW.id = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned key'); END`); err != nil {
		t.Fatal(err)
	}
	release := holdWriteLock(t, s) // let every claim queue up behind one BEGIN
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	for i := range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("k%d", i)
			if i == n {
				id = "poison"
			}
			_, errs[i] = s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "s", ID: id}})
		}()
	}
	time.Sleep(50 * time.Millisecond) // not asserted: only makes one shared batch likely
	release()
	wg.Wait()
	var be *idem.BackendError
	if !errors.As(errs[n], &be) || be.Op != "claim" {
		t.Fatalf("poisoned claim = %v, want a *idem.BackendError for op claim", errs[n])
	}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("claim %d failed with its group: %v", i, errs[i])
		}
		res, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "s", ID: fmt.Sprintf("k%d", i)}})
		if err != nil || res.Outcome != idem.InProgress {
			t.Fatalf("claim %d was not committed: %v, %v", i, res.Outcome, err)
		}
	}
	t.Logf("stats %+v", s.Stats())
}

// Sweep deletes in batches of Config.SweepBatch until nothing expired is left.
func TestSweepInBatches(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, _ := openStore(t, idemsqlite.Config{SweepBatch: 3, Now: clock.Now})
	ctx := ctxFor(t)
	for i := range 10 {
		if _, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "s", ID: fmt.Sprint(i)}, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	keep := idem.Key{Scope: "s", ID: "keep"}
	if _, err := s.Claim(ctx, idem.Claim{Key: keep, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep before expiry = %d, %v; want 0", n, err)
	}
	clock.Advance(2 * time.Minute)
	if n, err := s.Sweep(ctx); err != nil || n != 10 {
		t.Fatalf("Sweep = %d, %v; want 10", n, err)
	}
	if res, err := s.Claim(ctx, idem.Claim{Key: keep}); err != nil || res.Outcome != idem.InProgress {
		t.Fatalf("live key after Sweep = %v, %v; want InProgress", res.Outcome, err)
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
