package idempg_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/jackc/pgx/v5/pgxpool"
)

// benchClients is the number of concurrent clients every benchmark runs, with a pool
// connection each, so Claim and its raw-insert baseline compare like for like.
const benchClients = 16

// benchPool returns a pool of benchClients open connections on a fresh schema.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	cs, _ := testsvc.PostgresSchema(b)
	cfg, err := pgxpool.ParseConfig(cs)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = benchClients
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	// Open every connection now, so no dial is timed.
	conns := make([]*pgxpool.Conn, benchClients)
	for i := range conns {
		if conns[i], err = pool.Acquire(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Release()
	}
	return pool
}

func benchStore(b *testing.B) (*idempg.Store, *pgxpool.Pool) {
	b.Helper()
	pool := benchPool(b)
	s, err := idempg.New(context.Background(), pool, idempg.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return s, pool
}

// runClients runs op from benchClients goroutines with a fresh key id per call.
func runClients(b *testing.B, op func(ctx context.Context, id string) error) {
	b.Helper()
	testsvc.RunClients(b, benchClients, op)
}

func reportClaims(b *testing.B, claims int) {
	b.ReportMetric(float64(claims)/b.Elapsed().Seconds(), "claims/s")
}

func acquire(ctx context.Context, s idem.Store, id string) (idem.Result, error) {
	res, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "bench", ID: id}})
	if err == nil && res.Outcome != idem.Acquired {
		return res, fmt.Errorf("fresh key %s: outcome %v, want acquired", id, res.Outcome)
	}
	return res, err
}

// BenchmarkClaim: fresh keys, so every claim inserts (the acquire path).
func BenchmarkClaim(b *testing.B) {
	s, _ := benchStore(b)
	runClients(b, func(ctx context.Context, id string) error {
		_, err := acquire(ctx, s, id)
		return err
	})
	reportClaims(b, b.N)
}

// BenchmarkClaimTraced: BenchmarkClaim with the OpenTelemetry SDK sampling every
// claim's span (testsvc.SDKTracing), the traced figure beside the untraced one.
func BenchmarkClaimTraced(b *testing.B) {
	s, err := idempg.New(context.Background(), benchPool(b), idempg.Config{TracerProvider: testsvc.SDKTracing(b)})
	if err != nil {
		b.Fatal(err)
	}
	runClients(b, func(ctx context.Context, id string) error {
		_, err := acquire(ctx, s, id)
		return err
	})
	reportClaims(b, b.N)
}

// BenchmarkRawInsertOnConflict is Claim's baseline: the cheapest dedup write on a
// table with the same primary key, on the same pool at the same concurrency.
func BenchmarkRawInsertOnConflict(b *testing.B) {
	pool := benchPool(b)
	if _, err := pool.Exec(context.Background(),
		`CREATE TABLE bench_raw (scope text NOT NULL, id text NOT NULL, PRIMARY KEY (scope, id))`); err != nil {
		b.Fatal(err)
	}
	runClients(b, func(ctx context.Context, id string) error {
		_, err := pool.Exec(ctx, `INSERT INTO bench_raw (scope, id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, "bench", id)
		return err
	})
	reportClaims(b, b.N)
}

// BenchmarkClaimComplete: the whole life of a key, two round trips.
func BenchmarkClaimComplete(b *testing.B) {
	s, _ := benchStore(b)
	result := []byte(`{"status":"ok"}`)
	runClients(b, func(ctx context.Context, id string) error {
		res, err := acquire(ctx, s, id)
		if err != nil {
			return err
		}
		return s.Complete(ctx, idem.Key{Scope: "bench", ID: id}, res.Token, result)
	})
	reportClaims(b, b.N)
}

// BenchmarkClaimDuplicate: every client replays one completed key (a read).
func BenchmarkClaimDuplicate(b *testing.B) {
	s, _ := benchStore(b)
	ctx := context.Background()
	res, err := acquire(ctx, s, "dup")
	if err != nil {
		b.Fatal(err)
	}
	k := idem.Key{Scope: "bench", ID: "dup"}
	if err := s.Complete(ctx, k, res.Token, []byte("r")); err != nil {
		b.Fatal(err)
	}
	runClients(b, func(ctx context.Context, _ string) error {
		_, err := s.Claim(ctx, idem.Claim{Key: k})
		return err
	})
	reportClaims(b, b.N)
}

// BenchmarkClaimBatch: batches of 100 fresh keys, one round trip each.
func BenchmarkClaimBatch(b *testing.B) {
	const size = 100
	s, _ := benchStore(b)
	runClients(b, func(ctx context.Context, id string) error {
		claims := make([]idem.Claim, size)
		for i := range claims {
			claims[i] = idem.Claim{Key: idem.Key{Scope: "bench", ID: id + "-" + strconv.Itoa(i)}}
		}
		_, err := s.ClaimBatch(ctx, claims)
		return err
	})
	reportClaims(b, b.N*size)
}
