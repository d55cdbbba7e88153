package idemsqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/idemtest"
)

// openStore opens a store on a fresh file in t's temp dir and closes it at cleanup.
func openStore(t testing.TB, cfg idemsqlite.Config) (*idemsqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := idemsqlite.Open(context.Background(), path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, path
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	t.Parallel()
	idemtest.StoreSuite(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store {
			s, _ := openStore(t, idemsqlite.Config{})
			return s
		},
	})
}

func TestTxConformance(t *testing.T) {
	t.Parallel()
	idemtest.TxStoreSuite(t, func(t *testing.T) idemtest.TxEnv[*sql.Tx] {
		s, _ := openStore(t, idemsqlite.Config{})
		return idemtest.SQLTxEnv(t, s.DB(), s)
	})
}

func TestReopenKeepsRecordsAndTokensRise(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := idemsqlite.Open(ctx, path, idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	done := idem.Key{Scope: "s", ID: "done"}
	released := idem.Key{Scope: "s", ID: "released"}
	r1, err := s.Claim(ctx, idem.Claim{Key: done, Fingerprint: []byte("fp")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, done, r1.Token, []byte("paid")); err != nil {
		t.Fatal(err)
	}
	r2, err := s.Claim(ctx, idem.Claim{Key: released})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, released, r2.Token); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A clock far behind: tokens must still rise, from the durable floor.
	past := time.Now().Add(-24 * time.Hour)
	s2, err := idemsqlite.Open(ctx, path, idemsqlite.Config{Now: func() time.Time { return past }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	// The record was written with the real clock; seen from the past it is live.
	rep, err := s2.Claim(ctx, idem.Claim{Key: done, Fingerprint: []byte("fp")})
	if err != nil || rep.Outcome != idem.Replayed || string(rep.Record.Result) != "paid" {
		t.Fatalf("after reopen: %v %q, %v; want Replayed \"paid\"", rep.Outcome, rep.Record.Result, err)
	}
	again, err := s2.Claim(ctx, idem.Claim{Key: released})
	if err != nil || again.Outcome != idem.Acquired {
		t.Fatalf("released key after reopen: %v, %v; want Acquired", again.Outcome, err)
	}
	if again.Token <= r2.Token || again.Token <= r1.Token {
		t.Fatalf("token after reopen %d is not above the earlier %d and %d", again.Token, r1.Token, r2.Token)
	}
	if err := s2.Complete(ctx, released, r2.Token, nil); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("pre-reopen holder's Complete = %v, want ErrLeaseLost", err)
	}
}

func TestGroupCommitBatches(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, idemsqlite.Config{})
	ctx := ctxFor(t)
	const n = 200
	var start, wg sync.WaitGroup
	start.Add(1)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			k := idem.Key{Scope: "s", ID: fmt.Sprintf("k%d", i)}
			res, err := s.Claim(ctx, idem.Claim{Key: k})
			if err == nil && res.Outcome != idem.Acquired {
				err = errors.New("fresh key not acquired: " + res.Outcome.String())
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	start.Done()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Ops != n {
		t.Fatalf("writer applied %d ops, want %d", st.Ops, n)
	}
	// 200 goroutines racing: while one commit syncs, the others queue up and share
	// the next one. One op per commit would mean there is no group commit.
	if st.Commits >= st.Ops {
		t.Fatalf("%d ops took %d commits: calls were not grouped", st.Ops, st.Commits)
	}
	t.Logf("%d ops in %d commits", st.Ops, st.Commits)
}

func TestCloseStopsWriter(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	s, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	k := idem.Key{Scope: "s", ID: "k"}
	res, err := s.Claim(ctx, idem.Claim{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !idemsqlite.WriterExited(s) {
		t.Fatal("the writer goroutine is still running after Close")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if _, err := s.Claim(ctx, idem.Claim{Key: k}); !errors.Is(err, idem.ErrClosed) {
		t.Fatalf("Claim after Close = %v, want ErrClosed", err)
	}
	if err := s.Complete(ctx, k, res.Token, nil); !errors.Is(err, idem.ErrClosed) {
		t.Fatalf("Complete after Close = %v, want ErrClosed", err)
	}
	if err := s.Release(ctx, k, res.Token); !errors.Is(err, idem.ErrClosed) {
		t.Fatalf("Release after Close = %v, want ErrClosed", err)
	}
	if _, err := s.ClaimBatch(ctx, []idem.Claim{{Key: k}}); !errors.Is(err, idem.ErrClosed) {
		t.Fatalf("ClaimBatch after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Sweep(ctx); !errors.Is(err, idem.ErrClosed) {
		t.Fatalf("Sweep after Close = %v, want ErrClosed", err)
	}
	if idem.IsRetryable(idem.ErrClosed) {
		t.Fatal("ErrClosed reported as retryable")
	}
}

// Calls racing Close either complete or get ErrClosed; none hangs or panics.
func TestCloseWhileBusy(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	s, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32*20)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				k := idem.Key{Scope: "s", ID: fmt.Sprintf("g%d-%d", g, i)}
				if _, err := s.Claim(ctx, idem.Claim{Key: k}); err != nil && !errors.Is(err, idem.ErrClosed) {
					errs <- err
				}
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Claim racing Close: %v", err)
	}
	if !idemsqlite.WriterExited(s) {
		t.Fatal("the writer goroutine is still running after Close")
	}
}

func TestConfigValidationNamesField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cfg   idemsqlite.Config
		field string
	}{
		{idemsqlite.Config{MaxBatch: -1}, "Config.MaxBatch"},
		{idemsqlite.Config{SweepBatch: -5}, "Config.SweepBatch"},
		{idemsqlite.Config{BusyTimeout: -time.Second}, "Config.BusyTimeout"},
		{idemsqlite.Config{Synchronous: 9}, "Config.Synchronous"},
	}
	for _, tc := range cases {
		path := filepath.Join(t.TempDir(), "idem.db")
		_, err := idemsqlite.Open(context.Background(), path, tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field || !strings.Contains(err.Error(), tc.field) || ie.Fix == "" {
			t.Errorf("Open(%+v) = %v, want an *idem.InputError naming %s with a fix", tc.cfg, err, tc.field)
		}
	}
	for _, path := range []string{"", ":memory:", "file::memory:?cache=shared"} {
		if _, err := idemsqlite.Open(context.Background(), path, idemsqlite.Config{}); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), "path") {
			t.Errorf("Open(%q) = %v, want an input error naming path", path, err)
		}
	}
	if _, err := idemsqlite.New(context.Background(), nil, idemsqlite.Config{}); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), "db") {
		t.Errorf("New(nil) = %v, want an input error naming db", err)
	}
}

// A path with URI metacharacters names a file, not a query.
func TestOpenOddPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a?b#c%d")
	s, err := idemsqlite.Open(context.Background(), dir+".db", idemsqlite.Config{Synchronous: idemsqlite.SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Claim(ctxFor(t), idem.Claim{Key: idem.Key{Scope: "s", ID: "k"}}); err != nil {
		t.Fatal(err)
	}
	matches, _ := filepath.Glob(dir + ".db")
	if len(matches) != 1 {
		t.Fatalf("database file %q was not created", dir+".db")
	}
}

// Open's connections are in WAL mode, durable by default, and wait on a busy file.
func TestOpenPragmas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sync idemsqlite.Synchronous
		want int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{{idemsqlite.SyncFull, 2}, {idemsqlite.SyncNormal, 1}} {
		s, _ := openStore(t, idemsqlite.Config{Synchronous: tc.sync, BusyTimeout: 3 * time.Second})
		ctx := ctxFor(t)
		conn, err := s.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mode string
		var syncLevel, busy, fk int
		for _, q := range []struct {
			pragma string
			dst    any
		}{{"journal_mode", &mode}, {"synchronous", &syncLevel}, {"busy_timeout", &busy}, {"foreign_keys", &fk}} {
			if err := conn.QueryRowContext(ctx, "PRAGMA "+q.pragma).Scan(q.dst); err != nil {
				t.Fatalf("PRAGMA %s: %v", q.pragma, err)
			}
		}
		_ = conn.Close()
		if mode != "wal" || syncLevel != tc.want || busy != 3000 || fk != 1 {
			t.Fatalf("Synchronous %d: journal_mode=%s synchronous=%d busy_timeout=%d foreign_keys=%d; want wal %d 3000 1",
				tc.sync, mode, syncLevel, busy, fk, tc.want)
		}
	}
}
