package effect_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
)

// TestGroupWritesCallOnce: on Postgres, 48 workers run effects at once, 16 of them
// on keys another worker also runs, round after round until batch statements were
// written: every effect is called once, its result stored and replayed.
func TestGroupWritesCallOnce(t *testing.T) {
	t.Parallel()
	db := sqltest.Postgres(t)
	f, err := effect.New(context.Background(), db, effect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	for round := 0; round < 50 && (round < 2 || effect.GroupBatches(f) == 0); round++ {
		var wg sync.WaitGroup
		var failed atomic.Int64
		for w := range 48 {
			key := fmt.Sprintf("r%d-k%d", round, w%32) // keys 0–15 run twice
			wg.Go(func() {
				res, err := f.Do(context.Background(), key, "charge", func(context.Context, string) ([]byte, error) {
					mu.Lock()
					calls[key]++
					mu.Unlock()
					return []byte("ok-" + key), nil
				})
				switch {
				case err == effect.ErrInProgress: // its twin holds the key
				case err != nil || string(res) != "ok-"+key:
					failed.Add(1)
					t.Errorf("%s: %q, %v", key, res, err)
				}
			})
		}
		wg.Wait()
		if failed.Load() > 0 {
			t.FailNow()
		}
	}
	if effect.GroupBatches(f) == 0 {
		t.Fatal("no batch formed in 50 rounds of 48 concurrent effects")
	}
	mu.Lock()
	defer mu.Unlock()
	for key, n := range calls {
		if n != 1 {
			t.Errorf("%s called %d times", key, n)
		}
		res, err := f.Do(context.Background(), key, "charge", func(context.Context, string) ([]byte, error) {
			t.Errorf("%s called again", key)
			return nil, nil
		})
		if err != nil || string(res) != "ok-"+key {
			t.Errorf("%s replayed %q, %v", key, res, err)
		}
	}
}

// TestGroupFinishFences: a batch of completions records only those whose token
// still holds their effect: a taken-over token and an effect that does not exist
// are refused, the others written, in one statement.
func TestGroupFinishFences(t *testing.T) {
	t.Parallel()
	db := sqltest.Postgres(t)
	ctx := context.Background()
	f, err := effect.New(ctx, db, effect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	q := func(query string, args ...any) {
		t.Helper()
		if err := db.Read(ctx, func(qr idemsql.Querier) error { _, err := qr.Exec(ctx, query, args...); return err }); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b", "c"} {
		q(`INSERT INTO idem_effects (key, step, state, token, lease_until, attempts, created_at, updated_at) VALUES ($1, 's', 'pending', 1, 0, 1, 0, 0)`, k)
	}
	q(`UPDATE idem_effects SET token = 2 WHERE key = 'b'`) // b was taken over
	got := effect.FinishAsBatch(f, ctx, []string{"c", "b", "a", "zz"}, []string{"s", "s", "s", "s"}, []int64{1, 1, 1, 1}, []byte("r"))
	if want := []bool{true, false, true, false}; !slices.Equal(got, want) {
		t.Fatalf("batch finish = %v, want %v", got, want)
	}
	for k, want := range map[string]string{"a": "complete", "b": "pending", "c": "complete"} {
		var state string
		if err := db.Read(ctx, func(qr idemsql.Querier) error {
			return qr.QueryRow(ctx, `SELECT state FROM idem_effects WHERE key = $1`, k).Scan(&state)
		}); err != nil || state != want {
			t.Errorf("%s: state %q (%v), want %q", k, state, err, want)
		}
	}
}
