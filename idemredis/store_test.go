package idemredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/redis/go-redis/v9"
)

// bundle is what a test gets from setup: a store on its own key prefix, and the
// client beneath it for looking at the keys directly.
type bundle struct {
	store  *idemredis.Store
	client *redis.Client
	prefix string
}

func setup(t testing.TB, cfg idemredis.Config) bundle {
	t.Helper()
	return setupAt(t, testsvc.RedisAddr(), cfg)
}

// setupAt is setup on the Redis at addr.
func setupAt(t testing.TB, addr string, cfg idemredis.Config) bundle {
	t.Helper()
	prefix := testsvc.RedisPrefix(t)
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		deletePrefix(t, client, prefix)
		client.Close()
	})
	cfg.Prefix = prefix
	s, err := idemredis.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return bundle{store: s, client: client, prefix: prefix}
}

// deletePrefix removes the keys a test left behind with SCAN and DEL (never KEYS,
// which would block a shared Redis).
func deletePrefix(t testing.TB, client *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	flush := func() {
		if len(batch) > 0 {
			if err := client.Unlink(ctx, batch...).Err(); err != nil {
				t.Logf("cleanup of %s: %v", prefix, err)
			}
			batch = batch[:0]
		}
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			flush()
		}
	}
	flush()
	if err := iter.Err(); err != nil {
		t.Logf("cleanup scan of %s: %v", prefix, err)
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	idemtest.StoreSuite(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store { return setup(t, idemredis.Config{}).store },
		Unreachable: func(t *testing.T) idem.Store {
			client := redis.NewClient(&redis.Options{
				Addr:        testsvc.ClosedAddr(t),
				DialTimeout: 200 * time.Millisecond,
				MaxRetries:  1,
			})
			t.Cleanup(func() { client.Close() })
			s, err := idemredis.New(client, idemredis.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Release leaves a tombstone that keeps the token, so claiming the key again at once,
// many times over, still hands out strictly rising tokens.
func TestTokensRiseAcrossRelease(t *testing.T) {
	t.Parallel()
	b := setup(t, idemredis.Config{})
	ctx := ctxFor(t)
	c := idem.Claim{Key: idem.Key{Scope: "s", ID: "hot"}, Lease: time.Millisecond}
	var last uint64
	for i := range 2000 {
		res, err := b.store.Claim(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != idem.Acquired {
			t.Fatalf("claim %d after release: outcome %v, want acquired", i, res.Outcome)
		}
		if res.Token <= last {
			t.Fatalf("claim %d: token %d is not above the previous %d", i, res.Token, last)
		}
		last = res.Token
		if err := b.store.Release(ctx, c.Key, res.Token); err != nil {
			t.Fatal(err)
		}
		// The released holder is fenced at once.
		if err := b.store.Complete(ctx, c.Key, res.Token, nil); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("Complete after Release = %v, want ErrLeaseLost", err)
		}
	}
}

// A tombstone keeps the released lease's TTL: it does not outlive the lease.
func TestReleaseKeepsLeaseTTL(t *testing.T) {
	t.Parallel()
	b := setup(t, idemredis.Config{})
	ctx := ctxFor(t)
	const lease = time.Minute
	k := idem.Key{Scope: "s", ID: "released"}
	res, err := b.store.Claim(ctx, idem.Claim{Key: k, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Release(ctx, k, res.Token); err != nil {
		t.Fatal(err)
	}
	ttl, err := b.client.PTTL(ctx, b.store.Key(k)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > lease {
		t.Fatalf("tombstone PTTL = %v, want in (0, %v]", ttl, lease)
	}
}

func TestCompletedKeyExpiresAfterRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, idemredis.Config{})
	ctx := ctxFor(t)
	const lease, retention = time.Second, time.Hour
	k := idem.Key{Scope: "s", ID: "done"}
	res, err := b.store.Claim(ctx, idem.Claim{Key: k, Lease: lease, Retention: retention})
	if err != nil {
		t.Fatal(err)
	}
	ttl := b.client.PTTL(ctx, b.store.Key(k)).Val()
	if ttl <= 0 || ttl > lease {
		t.Fatalf("in-progress PTTL = %v, want in (0, %v]", ttl, lease)
	}
	if err := b.store.Complete(ctx, k, res.Token, []byte("r")); err != nil {
		t.Fatal(err)
	}
	ttl = b.client.PTTL(ctx, b.store.Key(k)).Val()
	if ttl <= lease || ttl > retention {
		t.Fatalf("completed PTTL = %v, want in (%v, %v]", ttl, lease, retention)
	}
	rep, err := b.store.Claim(ctx, idem.Claim{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != idem.Replayed || rep.Record.State != idem.StateCompleted ||
		rep.Record.CreatedAt.IsZero() || !rep.Record.ExpiresAt.After(rep.Record.CreatedAt.Add(lease)) {
		t.Fatalf("replay = %+v, want completed with its creation and retention end", rep)
	}
}

// Every script touches one key, so the keys of a store are all there is to look at:
// one per record, named prefix + scope length + scope + id.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	b := setup(t, idemredis.Config{})
	k := idem.Key{Scope: "tenant-a", ID: "order:17"}
	if got, want := b.store.Key(k), b.prefix+"8:tenant-a:order:17"; got != want {
		t.Fatalf("Key(%v) = %q, want %q", k, got, want)
	}
}

// A flushed script cache (a restarted or new Redis node) is reloaded transparently,
// by single claims and by batches.
func TestScriptCacheFlushed(t *testing.T) {
	b := setup(t, idemredis.Config{}) // not parallel: SCRIPT FLUSH is server-wide
	ctx := ctxFor(t)
	for i, claim := range []func(k idem.Key) (idem.Outcome, error){
		func(k idem.Key) (idem.Outcome, error) {
			res, err := b.store.Claim(ctx, idem.Claim{Key: k})
			return res.Outcome, err
		},
		func(k idem.Key) (idem.Outcome, error) {
			res, err := b.store.ClaimBatch(ctx, []idem.Claim{{Key: k}})
			if err != nil {
				return 0, err
			}
			return res[0].Outcome, nil
		},
	} {
		if err := b.client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		k := idem.Key{Scope: "s", ID: string(rune('a' + i))}
		if out, err := claim(k); err != nil || out != idem.Acquired {
			t.Fatalf("claim %d after SCRIPT FLUSH = %v, %v; want acquired", i, out, err)
		}
	}
}

func TestBatchReplayAndMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, idemredis.Config{})
	ctx := ctxFor(t)
	k := idem.Key{Scope: "s", ID: "k"}
	res, err := b.store.Claim(ctx, idem.Claim{Key: k, Fingerprint: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Complete(ctx, k, res.Token, nil); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.ClaimBatch(ctx, []idem.Claim{{Key: k, Fingerprint: []byte("a")}, {Key: k, Fingerprint: []byte("b")}})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Outcome != idem.Replayed || got[0].Record.Result == nil || got[1].Outcome != idem.Mismatch {
		t.Fatalf("batch = %+v, want replayed with an empty non-nil result, then mismatch", got)
	}
	if empty, err := b.store.ClaimBatch(ctx, nil); err != nil || len(empty) != 0 {
		t.Fatalf("empty batch = %v, %v; want no results and no error", empty, err)
	}
}

// A key under the prefix that another program wrote is reported, not misread.
func TestForeignValueIsBackendError(t *testing.T) {
	t.Parallel()
	b := setup(t, idemredis.Config{})
	ctx := ctxFor(t)
	k := idem.Key{Scope: "s", ID: "foreign"}
	if err := b.client.Set(ctx, b.store.Key(k), "hello", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := b.store.Claim(ctx, idem.Claim{Key: k})
	var be *idem.BackendError
	if !errors.As(err, &be) || be.Op != "claim" {
		t.Fatalf("Claim of a foreign value = %v, want a *idem.BackendError for claim", err)
	}
}
