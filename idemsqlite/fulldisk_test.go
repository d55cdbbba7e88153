package idemsqlite_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemhttp/gateway"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/testsvc"
)

// fullDiskErr checks that err is what a call on a full disk must return: a
// retryable *idem.BackendError matching ErrDiskFull whose message names the volume
// and the fix.
func fullDiskErr(t *testing.T, err error, dir string) {
	t.Helper()
	var be *idem.BackendError
	if !errors.As(err, &be) || !errors.Is(err, idemsqlite.ErrDiskFull) || !idem.IsRetryable(err) {
		t.Fatalf("error on a full disk = %v (%T), want a retryable *idem.BackendError matching idemsqlite.ErrDiskFull", err, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "disk is full") || !strings.Contains(msg, "free space on the volume of "+dir) {
		t.Fatalf("error on a full disk = %q, want it to say the disk is full and to free space on the volume of %s", msg, dir)
	}
}

// TestFullDisk fills a real filesystem with the store's own writes: every call that
// returned nil must still be there once space returns, every call that failed must
// say the disk is full, and the same Store (its group-commit writer still running)
// must take writes again without a restart.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	disk := testsvc.NewSmallDisk(t, 2<<20)
	ctx := ctxFor(t)
	path := filepath.Join(disk.Dir, "idem.db")
	s, err := idemsqlite.Open(ctx, path, idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	disk.FillLeaving(t, 256<<10)

	// Four writers claim and complete keys with 1 KiB results until each has seen
	// the disk refuse a few calls in a row; the failures are checked, not counted.
	var (
		mu       sync.Mutex
		acked    = map[idem.Key][]byte{} // Complete returned nil
		pending  = map[idem.Key]uint64{} // Claim acquired, Complete failed
		failures atomic.Int64
		wg       sync.WaitGroup
		firstErr atomic.Value
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			refused := 0
			for i := 0; refused < 5; i++ {
				k := idem.Key{Scope: "full", ID: fmt.Sprintf("w%d-%06d", w, i)}
				r, err := s.Claim(ctx, idem.Claim{Key: k, Lease: time.Hour})
				if err == nil && r.Outcome != idem.Acquired {
					err = fmt.Errorf("claim of a new key %s = %v, want acquired", k, r.Outcome)
				}
				if err != nil {
					refused++
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				result := bytes.Repeat([]byte{byte('a' + i%26)}, 1024)
				mu.Lock()
				if err := s.Complete(ctx, k, r.Token, result); err != nil {
					pending[k] = r.Token
					refused++
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					acked[k] = result
					refused = 0
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fullDiskErr(t, firstErr.Load().(error), disk.Dir)
	if len(acked) == 0 {
		t.Fatal("no completion succeeded before the disk filled: the ballast left no room")
	}
	if idemsqlite.WriterExited(s) {
		t.Fatal("the group-commit writer exited after failed batches")
	}

	// SQLite checkpoints the WAL into the database file; on a full disk that copy
	// cannot grow the file. It must fail cleanly (or do nothing), never lose a commit.
	var busy, logged, copied int
	cpErr := s.DB().QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logged, &copied)
	t.Logf("%d completions stored, %d claims held whose completion failed, %d calls refused; checkpoint on the full disk: err=%v busy=%d wal=%d copied=%d",
		len(acked), len(pending), failures.Load(), cpErr, busy, logged, copied)

	disk.Free(t) // space returns: the same store, no restart
	for k, token := range pending {
		// A claim that was acknowledged is still held by its token: the completion
		// that failed is retried and lands.
		if err := s.Complete(ctx, k, token, []byte("late")); err != nil {
			t.Fatalf("Complete %s after space returned: %v", k, err)
		}
		acked[k] = []byte("late")
	}
	r, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "full", ID: "after"}, Lease: time.Minute})
	if err != nil || r.Outcome != idem.Acquired {
		t.Fatalf("claim after space returned = %v, %v; want acquired without reopening", r.Outcome, err)
	}
	if err := s.DB().QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logged, &copied); err != nil || busy != 0 {
		t.Fatalf("checkpoint after space returned: err=%v busy=%d", err, busy)
	}
	checkStored(t, s, acked)

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s, err = idemsqlite.Open(ctx, path, idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	checkStored(t, s, acked)
}

// checkStored claims every acknowledged key again: each must be replayed with the
// result it was completed with.
func checkStored(t *testing.T, s *idemsqlite.Store, acked map[idem.Key][]byte) {
	t.Helper()
	ctx := ctxFor(t)
	for k, want := range acked {
		r, err := s.Claim(ctx, idem.Claim{Key: k, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome != idem.Replayed || !bytes.Equal(r.Record.Result, want) {
			t.Fatalf("acknowledged key %s: outcome %v, result of %d bytes; want replayed with its %d-byte result (lost)",
				k, r.Outcome, len(r.Record.Result), len(want))
		}
	}
}

// TestFullDiskHTTP: the idemhttp middleware on a store whose disk is full answers
// 503 with Retry-After and does not run the handler, and once space returns the
// same key runs the handler once and is replayed after. idem serve's /healthz
// check (gateway.StoreHealth) reports the store unhealthy while the disk is full.
func TestFullDiskHTTP(t *testing.T) {
	t.Parallel()
	disk := testsvc.NewSmallDisk(t, 1<<20)
	ctx := ctxFor(t)
	s, err := idemsqlite.Open(ctx, filepath.Join(disk.Dir, "idem.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	mw, err := idemhttp.Middleware(idemhttp.Config{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "order taken")
	})))
	t.Cleanup(srv.Close)
	post := func(key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"sku":1}`))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	disk.Fill(t)
	// Keys are posted until the store refuses one: each refused one must be a 503
	// with Retry-After, never a 2xx, and its handler must not have run.
	var refused string
	for i := 0; refused == "" && i < 10_000; i++ {
		key := fmt.Sprintf("order-%d", i)
		before := runs.Load()
		resp := post(key)
		switch {
		case resp.StatusCode == http.StatusCreated:
		case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
			if runs.Load() != before {
				t.Fatalf("%s: answered 503 but the handler ran", key)
			}
			refused = key
		default:
			t.Fatalf("%s on a full disk: %d (Retry-After %q), want 201 or 503 with Retry-After", key, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if refused == "" {
		t.Fatal("the store never refused a claim on a full disk")
	}
	// idem serve's /healthz claims a key: it must say the store fails while full.
	health := gateway.StoreHealth(s, slog.New(slog.DiscardHandler), func(err error) string { return err.Error() })
	if ok, msg := health(ctx); ok || !strings.Contains(msg, "disk is full") {
		t.Fatalf("/healthz on a full disk = %v %q, want unhealthy, saying the disk is full", ok, msg)
	}

	disk.Free(t)
	if ok, msg := health(ctx); !ok {
		t.Fatalf("/healthz after space returned = %v %q, want healthy", ok, msg)
	}
	before := runs.Load()
	if resp := post(refused); resp.StatusCode != http.StatusCreated || runs.Load() != before+1 {
		t.Fatalf("%s after space returned: %d, handler runs %d; want 201 and one run", refused, resp.StatusCode, runs.Load()-before)
	}
	if resp := post(refused); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || runs.Load() != before+1 {
		t.Fatalf("%s retried: %d (replayed %q), handler runs %d; want its 201 replayed and no second run",
			refused, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), runs.Load()-before)
	}
}
