package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Memory measures the memory store's claims beside a sharded map insert.
func Memory(ctx context.Context, o Options) ([]Row, error) {
	// No budget: a figure measures millions of fresh keys, which would fill the
	// default 512 MiB within seconds, and the raw baseline has no bound either.
	s, err := idemmem.New(idemmem.Config{MaxBytes: -1})
	if err != nil {
		return nil, err
	}
	type shard struct {
		mu sync.Mutex
		m  map[string]struct{}
	}
	shards := make([]shard, 64)
	for i := range shards {
		shards[i].m = make(map[string]struct{})
	}
	seed := maphash.MakeSeed()
	base, err := measure(ctx, o, 1, func(_ context.Context, n uint64) error {
		k := fmt.Sprintf("bench\x00raw-%d", n)
		sh := &shards[maphash.String(seed, k)&63]
		sh.mu.Lock()
		if _, ok := sh.m[k]; !ok {
			sh.m[k] = struct{}{}
		}
		sh.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	claim, err := measure(ctx, o, 1, claimOp(s, "m"))
	if err != nil {
		return nil, err
	}
	pair, err := measure(ctx, o, 1, claimCompleteOp(s, "m"))
	if err != nil {
		return nil, err
	}
	return []Row{
		versus("memory", "claim", claim, "sharded map insert", base, o),
		versus("memory", "claim+complete pair", pair, "", 0, o),
	}, nil
}

// SQLite measures the SQLite store in a temporary directory beside a raw
// INSERT … ON CONFLICT DO NOTHING on a file of its own.
func SQLite(ctx context.Context, o Options) ([]Row, error) {
	dir, err := os.MkdirTemp("", "idem-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	// Baseline: the same pragmas as idemsqlite (WAL, synchronous=FULL), one INSERT … ON CONFLICT per
	// transaction, as a plain application would write.
	raw, err := open.SQLite(filepath.Join(dir, "raw.db"))
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	if _, err := raw.ExecContext(ctx, "CREATE TABLE raw (scope TEXT, id TEXT, PRIMARY KEY (scope, id)) WITHOUT ROWID"); err != nil {
		return nil, err
	}
	base, err := measure(ctx, o, 1, func(ctx context.Context, n uint64) error {
		_, err := raw.ExecContext(ctx, "INSERT INTO raw (scope, id) VALUES ('bench', ?) ON CONFLICT DO NOTHING", fmt.Sprint(n))
		return err
	})
	if err != nil {
		return nil, err
	}

	s, err := idemsqlite.Open(ctx, filepath.Join(dir, "idem.db"), idemsqlite.Config{})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	claim, err := measure(ctx, o, 1, claimOp(s, "s"))
	if err != nil {
		return nil, err
	}
	single := o
	single.Concurrency = 1
	one, err := measure(ctx, single, 1, claimOp(s, "s1"))
	if err != nil {
		return nil, err
	}
	batch, err := measure(ctx, o, o.Batch, batchOp(s, "sb", o.Batch))
	if err != nil {
		return nil, err
	}
	return []Row{
		versus("sqlite", "claim (durable, group commit)", claim, "INSERT … ON CONFLICT, 1 per tx", base, o),
		versus("sqlite", "claim, 1 client", one, "", 0, single),
		versus("sqlite", fmt.Sprintf("claim in batches of %d", o.Batch), batch, "claim (unbatched)", claim, o),
	}, nil
}

// Postgres measures the PostgreSQL store at o.Postgres, in a schema of its own,
// beside a raw INSERT … ON CONFLICT DO NOTHING.
func Postgres(ctx context.Context, o Options) ([]Row, error) {
	schema := "idem_bench_" + open.RandomHex(4)
	admin, err := pgxpool.New(ctx, o.Postgres)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, fmt.Errorf("postgres at %s: %w (start it with `make services`)", o.Postgres, err)
	}
	defer admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")

	cfg, err := pgxpool.ParseConfig(o.Postgres)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(o.Concurrency)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE TABLE raw (scope text, id text, PRIMARY KEY (scope, id))"); err != nil {
		return nil, err
	}
	base, err := measure(ctx, o, 1, func(ctx context.Context, n uint64) error {
		_, err := pool.Exec(ctx, "INSERT INTO raw (scope, id) VALUES ('bench', $1) ON CONFLICT DO NOTHING", fmt.Sprint(n))
		return err
	})
	if err != nil {
		return nil, err
	}
	s, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		return nil, err
	}
	claim, err := measure(ctx, o, 1, claimOp(s, "p"))
	if err != nil {
		return nil, err
	}
	batch, err := measure(ctx, o, o.Batch, batchOp(s, "pb", o.Batch))
	if err != nil {
		return nil, err
	}
	return []Row{
		versus("postgres", "claim", claim, "INSERT … ON CONFLICT DO NOTHING", base, o),
		versus("postgres", fmt.Sprintf("claim in batches of %d", o.Batch), batch, "claim (unbatched)", claim, o),
	}, nil
}

// Redis measures the Redis store at o.Redis beside raw SET NX PX.
func Redis(ctx context.Context, o Options) ([]Row, error) {
	client := redis.NewClient(&redis.Options{Addr: o.Redis, PoolSize: o.Concurrency})
	defer client.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s: %w (start it with `make services`)", o.Redis, err)
	}
	run := open.RandomHex(4)
	base, err := measure(ctx, o, 1, func(ctx context.Context, n uint64) error {
		err := client.SetArgs(ctx, fmt.Sprintf("idembench:%s:raw:%d", run, n), "1",
			redis.SetArgs{Mode: "NX", TTL: time.Minute}).Err()
		if errors.Is(err, redis.Nil) { // NX found the key: a duplicate, not a failure
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s, err := idemredis.New(client, idemredis.Config{Prefix: "idembench:" + run + ":"})
	if err != nil {
		return nil, err
	}
	var store idem.Store = s
	claim, err := measure(ctx, o, 1, claimOp(store, "r"))
	if err != nil {
		return nil, err
	}
	batch, err := measure(ctx, o, o.Batch, batchOp(s, "rb", o.Batch))
	if err != nil {
		return nil, err
	}
	return []Row{
		versus("redis", "claim", claim, "SET NX PX", base, o),
		versus("redis", fmt.Sprintf("claim in batches of %d", o.Batch), batch, "claim (unbatched)", claim, o),
	}, nil
}
