package idemseq_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemsqlite"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver
)

// hiloFake is a BlockSource built from function fields, so each test says only what
// its source does.
type hiloFake struct {
	next func(ctx context.Context) (uint64, error)
	size uint64
}

func (f hiloFake) NextBlock(ctx context.Context) (uint64, error) { return f.next(ctx) }
func (f hiloFake) BlockSize() uint64                             { return f.size }

// hiloCounter is an in-memory source: block n starts at n*size+1.
func hiloCounter(size uint64, calls *atomic.Uint64) hiloFake {
	return hiloFake{size: size, next: func(context.Context) (uint64, error) {
		return (calls.Add(1)-1)*size + 1, nil
	}}
}

func hiloCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// hiloWait fails the test if ch does not deliver: a guard against a hang, not a
// timing assertion.
func hiloWait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not happen within 30s", what)
		panic("unreachable")
	}
}

// Callers that find the block used up wait for one NextBlock instead of each making
// their own: 32 goroutines, 3,200 ids, blocks of 64 => exactly 50 calls, never two at
// once, and every id from 1 to 3,200 exactly once.
func TestHiLoSharedFetch(t *testing.T) {
	t.Parallel()
	const goroutines, each, size = 32, 100, 64
	var calls, inFlight, maxInFlight atomic.Uint64
	counter := hiloCounter(size, &calls)
	src := hiloFake{size: size, next: func(ctx context.Context) (uint64, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(^uint64(0))
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		time.Sleep(time.Millisecond) // slow enough that the block runs dry under many waiters
		return counter.next(ctx)
	}}
	h := idemseq.NewHiLo(src)
	nexts := make([]func(context.Context) (uint64, error), goroutines)
	for g := range nexts {
		nexts[g] = h.Next
	}
	seen := hiloCollect(t, each, nexts)
	if got, want := calls.Load(), uint64(goroutines*each/size); got != want {
		t.Errorf("NextBlock calls = %d, want %d (one per block)", got, want)
	}
	if m := maxInFlight.Load(); m != 1 {
		t.Errorf("NextBlock calls in flight at once = %d, want 1", m)
	}
	for id := uint64(1); id <= goroutines*each; id++ {
		if !seen[id] {
			t.Fatalf("id %d never handed out; want 1..%d each once", id, goroutines*each)
		}
	}
}

// hiloCollect runs each function of nexts in its own goroutine, each times, and
// fails on an error or an id seen twice. Each goroutine's ids must increase.
func hiloCollect(t *testing.T, each int, nexts []func(context.Context) (uint64, error)) map[uint64]bool {
	t.Helper()
	ctx := hiloCtx(t)
	goroutines := len(nexts)
	ids := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g, next := range nexts {
		wg.Go(func() {
			for range each {
				id, err := next(ctx)
				if err != nil {
					t.Errorf("Next: %v", err)
					return
				}
				if n := len(ids[g]); n > 0 && id <= ids[g][n-1] {
					t.Errorf("Next = %d after %d in one goroutine; want increasing", id, ids[g][n-1])
				}
				ids[g] = append(ids[g], id)
			}
		})
	}
	wg.Wait()
	seen := make(map[uint64]bool, goroutines*each)
	for _, list := range ids {
		for _, id := range list {
			if seen[id] {
				t.Fatalf("id %d handed out twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != goroutines*each && !t.Failed() {
		t.Fatalf("got %d ids, want %d", len(seen), goroutines*each)
	}
	return seen
}

// A waiter whose context ends returns at once, while the fetch it waited for is still
// running; the fetch, once done, serves the next caller.
func TestHiLoWaiterCancelled(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	h := idemseq.NewHiLo(hiloFake{size: 10, next: func(context.Context) (uint64, error) {
		close(entered)
		<-release
		return 1, nil
	}})
	leader := make(chan uint64, 1)
	go func() {
		id, _ := h.Next(context.Background())
		leader <- id
	}()
	hiloWait(t, entered, "the first NextBlock")

	ctx, cancel := context.WithCancel(context.Background())
	waiter := make(chan error, 1)
	go func() {
		_, err := h.Next(ctx)
		waiter <- err
	}()
	cancel()
	if err := hiloWait(t, waiter, "the cancelled waiter's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a cancelled context = %v, want context.Canceled", err)
	}
	close(release)
	if id := hiloWait(t, leader, "the fetching caller's return"); id != 1 {
		t.Fatalf("fetching caller got %d, want 1", id)
	}
	if id, err := h.Next(context.Background()); id != 2 || err != nil {
		t.Fatalf("Next after the fetch = %d, %v; want 2 from the same block", id, err)
	}
}

// If the caller making the fetch gives up, a waiter with time left fetches instead of
// inheriting the other caller's cancellation.
func TestHiLoFetcherCancelled(t *testing.T) {
	t.Parallel()
	var calls atomic.Uint64
	entered := make(chan struct{})
	h := idemseq.NewHiLo(hiloFake{size: 10, next: func(ctx context.Context) (uint64, error) {
		if calls.Add(1) == 1 {
			close(entered)
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return 11, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	fetcher := make(chan error, 1)
	go func() {
		_, err := h.Next(ctx)
		fetcher <- err
	}()
	hiloWait(t, entered, "the first NextBlock")
	waiter := make(chan uint64, 1)
	go func() {
		id, err := h.Next(context.Background())
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waiter <- id
	}()
	time.Sleep(10 * time.Millisecond) // let the waiter queue up; either order must pass
	cancel()
	if err := hiloWait(t, fetcher, "the fetcher's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("fetcher = %v, want context.Canceled", err)
	}
	if id := hiloWait(t, waiter, "the waiter's return"); id != 11 {
		t.Fatalf("waiter got %d, want 11 from a second NextBlock", id)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("NextBlock calls = %d, want 2", n)
	}
}

// A failed NextBlock is reported and not remembered: the next Next tries again.
func TestHiLoErrorThenRetry(t *testing.T) {
	t.Parallel()
	var calls atomic.Uint64
	down := &idem.BackendError{Backend: "postgres", Op: "hilo.next", Err: errors.New("connection refused")}
	h := idemseq.NewHiLo(hiloFake{size: 5, next: func(context.Context) (uint64, error) {
		if calls.Add(1) == 1 {
			return 0, down
		}
		return 6, nil
	}})
	ctx := hiloCtx(t)
	if _, err := h.Next(ctx); !errors.Is(err, down) || !idem.IsRetryable(err) {
		t.Fatalf("Next with the backend down = %v, want the retryable backend error", err)
	}
	if id, err := h.Next(ctx); id != 6 || err != nil {
		t.Fatalf("Next after recovery = %d, %v; want 6", id, err)
	}
}

// Ids stop at 1<<63-1 with ErrOutOfIDs; they never wrap.
func TestHiLoOverflow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		first   uint64
		size    uint64
		wantIDs int // handed out before ErrOutOfIDs
	}{
		{"last block fits exactly", math.MaxInt64 - 9, 10, 10},
		{"block reaches past the end", math.MaxInt64 - 5, 10, 0},
		{"first past the end", math.MaxInt64 + 1, 1, 0},
		{"max first and max size", math.MaxUint64, idemseq.MaxBlockSize, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			next := tt.first
			h := idemseq.NewHiLo(hiloFake{size: tt.size, next: func(context.Context) (uint64, error) {
				first := next
				next += tt.size
				return first, nil
			}})
			for i := range tt.wantIDs + 1 {
				id, err := h.Next(hiloCtx(t))
				if i == tt.wantIDs {
					if !errors.Is(err, idemseq.ErrOutOfIDs) || idem.IsRetryable(err) {
						t.Fatalf("Next #%d = %d, %v; want ErrOutOfIDs, not retryable", i, id, err)
					}
					return
				}
				if err != nil || id > math.MaxInt64 {
					t.Fatalf("Next #%d = %d, %v; want an id <= 1<<63-1", i, id, err)
				}
			}
		})
	}
}

// Bad arguments are an *idem.InputError naming the field, before any round trip.
func TestHiLoInvalidInput(t *testing.T) {
	t.Parallel()
	ctx := hiloCtx(t)
	// Neither handle connects: validation must fail before the first round trip.
	pg, err := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	lite, err := sql.Open("sqlite", "file:"+t.TempDir()+"/never/opened.db")
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	my, err := sql.Open("mysql", "nobody@tcp(127.0.0.1:1)/none?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer my.Close()

	tests := []struct {
		name, seq string
		block     uint64
		nilDB     bool
		field     string
	}{
		{"empty name", "", 10, false, "name"},
		{"leading digit", "1ids", 10, false, "name"},
		{"dash", "order-ids", 10, false, "name"},
		{"space", "order ids", 10, false, "name"},
		{"quote", `ids"; DROP TABLE x; --`, 10, false, "name"},
		{"schema qualified", "public.ids", 10, false, "name"},
		{"non-ASCII", "idé", 10, false, "name"},
		{"64 bytes", strings.Repeat("a", 64), 10, false, "name"},
		{"zero block", "ids", 0, false, "block"},
		{"block over 1<<32", "ids", 1<<32 + 1, false, "block"},
		{"nil db", "ids", 10, true, "db"},
	}
	for _, tt := range tests {
		for backend, open := range map[string]func() (idemseq.BlockSource, error){
			"postgres": func() (idemseq.BlockSource, error) {
				return idempg.HiLoSequence(ctx, hiloMaybeNil(pg, tt.nilDB), tt.seq, tt.block)
			},
			"sqlite": func() (idemseq.BlockSource, error) {
				return idemsqlite.HiLoTable(ctx, hiloMaybeNil(lite, tt.nilDB), tt.seq, tt.block)
			},
			"mysql": func() (idemseq.BlockSource, error) {
				return idemmysql.HiLoTable(ctx, hiloMaybeNil(my, tt.nilDB), tt.seq, tt.block)
			},
		} {
			_, err := open()
			var ie *idem.InputError
			if !errors.As(err, &ie) || ie.Field != tt.field || ie.Fix == "" {
				t.Errorf("%s, %s: err = %v, want an InputError on %q with a fix", backend, tt.name, err, tt.field)
			}
		}
	}

	for name, src := range map[string]idemseq.BlockSource{
		"nil source": nil,
		"zero size":  hiloFake{size: 0},
		"huge size":  hiloFake{size: math.MaxUint64},
	} {
		if _, err := idemseq.NewHiLo(src).Next(ctx); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("NewHiLo(%s).Next = %v, want an InputError", name, err)
		}
	}
}

func hiloMaybeNil(db *sql.DB, isNil bool) *sql.DB {
	if isNil {
		return nil
	}
	return db
}
