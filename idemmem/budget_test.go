package idemmem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
)

// Goroutines claim and complete fresh keys until the budget refuses them: the
// refusal names the limit and the fix, no completed key is forgotten, an admitted
// claim still completes with a result past the budget, and a sweep makes room.
func TestBudgetRefusesNewKeysAndNeverDropsCompleted(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC).UnixNano())
	const budget = 64 << 10
	s := newStore(t, idemmem.Config{MaxBytes: budget, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	ctx := context.Background()
	retention := time.Hour

	// Admitted before the store fills up; completed after, with a large result.
	big := idem.Key{Scope: "s", ID: "big"}
	held, err := s.Claim(ctx, idem.Claim{Key: big, Lease: time.Hour, Retention: retention})
	if err != nil || held.Outcome != idem.Acquired {
		t.Fatalf("claim big: %+v %v", held, err)
	}

	var (
		mu        sync.Mutex
		completed []idem.Key
		refusals  atomic.Int64
		next      atomic.Int64
		wg        sync.WaitGroup
	)
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Far more keys than fit: a store that never refuses fails below
			// instead of looping forever.
			for refused := 0; refused < 3 && next.Load() < 20_000; {
				k := idem.Key{Scope: "s", ID: fmt.Sprintf("g%d-%d", g, next.Add(1))}
				fp := []byte(nil)
				if g%2 == 0 {
					fp = []byte("fingerprint") // a live completed record, not a compact one
				}
				res, err := s.Claim(ctx, idem.Claim{Key: k, Fingerprint: fp, Retention: retention})
				if err != nil {
					var be *idem.BackendError
					var fe *idemmem.FullError
					if !errors.Is(err, idemmem.ErrFull) || !errors.As(err, &be) || be.Backend != "memory" ||
						!errors.As(err, &fe) || fe.MaxBytes != budget ||
						!strings.Contains(err.Error(), "Config.MaxBytes") {
						errs <- fmt.Errorf("claim refused with %v, want an ErrFull naming Config.MaxBytes", err)
						return
					}
					refused++
					refusals.Add(1)
					continue
				}
				if res.Outcome != idem.Acquired {
					errs <- fmt.Errorf("fresh key %v: outcome %v", k, res.Outcome)
					return
				}
				result := []byte(nil)
				if g%4 == 0 {
					result = []byte("result bytes") // counted only now, past the claim's reservation
				}
				if err := s.Complete(ctx, k, res.Token, result); err != nil {
					errs <- fmt.Errorf("complete %v: %w", k, err)
					return
				}
				mu.Lock()
				completed = append(completed, k)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if refusals.Load() == 0 || len(completed) < 100 {
		t.Fatalf("%d keys completed and %d claims refused: the budget did not fill", len(completed), refusals.Load())
	}
	// Completions are never refused, so each goroutine's last claim, admitted just
	// under the budget, may have added its result on top.
	if used, slack := s.Bytes(), int64(8*len("result bytes")); used > budget+slack {
		t.Fatalf("Bytes() = %d, over the budget %d by more than the results of 8 admitted claims", used, budget)
	}
	t.Logf("%d keys completed in %d bytes of budget, %d claims refused", len(completed), budget, refusals.Load())

	// Full: claims of known keys still answer; a held claim still completes.
	for _, k := range completed {
		res, err := s.Claim(ctx, idem.Claim{Key: k, Retention: retention})
		if err != nil || res.Outcome == idem.Acquired {
			t.Fatalf("completed key %v forgotten while full: %+v %v", k, res, err)
		}
	}
	if err := s.Complete(ctx, big, held.Token, make([]byte, 32<<10)); err != nil {
		t.Fatalf("Complete of a claim admitted before the store filled: %v", err)
	}
	if rep, err := s.Claim(ctx, idem.Claim{Key: big}); err != nil || rep.Outcome != idem.Replayed || len(rep.Record.Result) != 32<<10 {
		t.Fatalf("replay of big: %v %v (%d result bytes)", rep.Outcome, err, len(rep.Record.Result))
	}
	if _, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "s", ID: "one-more"}}); !errors.Is(err, idemmem.ErrFull) {
		t.Fatalf("claim of a new key when full = %v, want ErrFull", err)
	}

	// Retention passes; the sweep frees every record and its room.
	now.Add(int64(2 * retention))
	n, err := s.Sweep(ctx)
	if err != nil || n != len(completed)+1 {
		t.Fatalf("Sweep = %d, %v; want %d records", n, err, len(completed)+1)
	}
	if used := s.Bytes(); used != 0 {
		t.Fatalf("Bytes() = %d after sweeping every record, want 0", used)
	}
	if res, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "s", ID: "one-more"}}); err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("claim after the sweep: %+v %v", res, err)
	}
}

// A failed batch gives back the keys it had acquired before the budget ran out.
func TestBudgetFailedBatchKeepsNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t, idemmem.Config{MaxBytes: 1000})
	claims := make([]idem.Claim, 20)
	for i := range claims {
		claims[i] = idem.Claim{Key: idem.Key{Scope: "s", ID: fmt.Sprint(i)}}
	}
	if _, err := s.ClaimBatch(context.Background(), claims); !errors.Is(err, idemmem.ErrFull) {
		t.Fatalf("ClaimBatch past the budget = %v, want ErrFull", err)
	}
	if s.Bytes() != 0 || s.Len() != 0 {
		t.Fatalf("failed batch left %d records (%d bytes)", s.Len(), s.Bytes())
	}
}

func TestUnlimitedBudget(t *testing.T) {
	t.Parallel()
	s := newStore(t, idemmem.Config{MaxBytes: -1})
	for i := range 10_000 {
		if _, err := s.Claim(context.Background(), idem.Claim{Key: idem.Key{Scope: "s", ID: fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestParseMaxBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0": 0, "1024": 1024, "512MiB": 512 << 20, "512 mib": 512 << 20, "2GB": 2e9, "2g": 2e9,
		"1KiB": 1024, "10b": 10, "-1": -1, "unlimited": -1, "3Gi": 3 << 30,
	} {
		if got, err := idemmem.ParseMaxBytes(in); err != nil || got != want {
			t.Errorf("ParseMaxBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "1.5GB", "9999999TiB", "MiB"} {
		var ie *idem.InputError
		if _, err := idemmem.ParseMaxBytes(in); !errors.As(err, &ie) || ie.Field != "max_bytes" {
			t.Errorf("ParseMaxBytes(%q) = %v, want an *idem.InputError for max_bytes", in, err)
		}
	}
}

// Shards draw room in chunks; a refusal comes only once the records themselves
// fill the budget, not when room sits idle in other shards' chunks.
func TestBudgetRefusesOnlyWhenRecordsFillIt(t *testing.T) {
	t.Parallel()
	const budget = 4 << 20 // chunks of 4 KiB over 64 shards
	s := newStore(t, idemmem.Config{MaxBytes: budget})
	ctx := context.Background()
	for i := 0; ; i++ {
		k := idem.Key{Scope: "s", ID: fmt.Sprint(i)}
		res, err := s.Claim(ctx, idem.Claim{Key: k})
		if errors.Is(err, idemmem.ErrFull) {
			break
		}
		if err != nil || res.Outcome != idem.Acquired {
			t.Fatalf("claim %d: %+v %v", i, res, err)
		}
		if err := s.Complete(ctx, k, res.Token, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The refused claim needed a live record's room (192 bytes estimated).
	if used := s.Bytes(); used > budget || used < budget-192 {
		t.Fatalf("refused at Bytes() = %d of %d: room was left idle", used, budget)
	}
}
