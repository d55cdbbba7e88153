package idemmysql_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/internal/testsvc"
)

// benchClients is the number of concurrent clients of every benchmark, each with a
// connection, so Claim and its raw baseline compare like for like.
const benchClients = 16

func runClients(b *testing.B, op func(ctx context.Context, id string) error) {
	b.Helper()
	testsvc.RunClients(b, benchClients, op)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkClaim is a fresh key's claim, its own transaction; BenchmarkRawInsertIgnore
// is the baseline: one autocommit INSERT IGNORE of the same key shape, and
// BenchmarkRawInsertIgnoreRows one of the same rows (every column of the records
// table, and its index on expires_us). BenchmarkClaimUngrouped is Claim with group
// claims off (Config.MaxClaimGroup 1): every claim its own CALL.
func BenchmarkClaim(b *testing.B) {
	s := openBench(b)
	runClients(b, func(ctx context.Context, id string) error {
		_, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "bench", ID: id}})
		return err
	})
}

// BenchmarkClaimTraced is BenchmarkClaim with the OpenTelemetry SDK sampling every
// claim's span (testsvc.SDKTracing).
func BenchmarkClaimTraced(b *testing.B) {
	s := openBenchConfig(b, idemmysql.Config{TracerProvider: testsvc.SDKTracing(b)})
	runClients(b, func(ctx context.Context, id string) error {
		_, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "bench", ID: id}})
		return err
	})
}

func BenchmarkClaimUngrouped(b *testing.B) {
	s := openBenchConfig(b, idemmysql.Config{MaxClaimGroup: 1})
	runClients(b, func(ctx context.Context, id string) error {
		_, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "bench", ID: id}})
		return err
	})
}

func BenchmarkClaimComplete(b *testing.B) {
	claimThen(b, func(ctx context.Context, s *idemmysql.Store, k idem.Key, token uint64) error {
		return s.Complete(ctx, k, token, []byte("result"))
	})
}

// BenchmarkClaimReleaseRetry is a failed attempt and its retry: a fresh key's
// claim, its release, and the claim that takes the released row over.
func BenchmarkClaimReleaseRetry(b *testing.B) {
	claimThen(b, func(ctx context.Context, s *idemmysql.Store, k idem.Key, token uint64) error {
		if err := s.Release(ctx, k, token); err != nil {
			return err
		}
		r, err := s.Claim(ctx, idem.Claim{Key: k})
		if err == nil && r.Outcome != idem.Acquired {
			err = fmt.Errorf("claim after release: %v, want acquired", r.Outcome)
		}
		return err
	})
}

// claimThen measures a fresh key's claim followed by then with its token.
func claimThen(b *testing.B, then func(ctx context.Context, s *idemmysql.Store, k idem.Key, token uint64) error) {
	s := openBench(b)
	runClients(b, func(ctx context.Context, id string) error {
		k := idem.Key{Scope: "bench", ID: id}
		r, err := s.Claim(ctx, idem.Claim{Key: k})
		if err != nil {
			return err
		}
		return then(ctx, s, k, r.Token)
	})
}

// BenchmarkClaimBatch100: fresh keys claimed 100 to a ClaimBatch (one transaction);
// the figure counts claims.
func BenchmarkClaimBatch100(b *testing.B) {
	s := openBench(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		claims := make([]idem.Claim, 100)
		for j := range claims {
			claims[j] = idem.Claim{Key: idem.Key{Scope: "batch", ID: fmt.Sprint(i, "-", j)}}
		}
		if _, err := s.ClaimBatch(context.Background(), claims); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "claims/s")
}

func BenchmarkRawInsertIgnore(b *testing.B) {
	s := openBench(b)
	if _, err := s.DB().Exec(`CREATE TABLE raw (scope VARBINARY(255) NOT NULL, id VARBINARY(255) NOT NULL, PRIMARY KEY (scope, id)) ENGINE=InnoDB`); err != nil {
		b.Fatal(err)
	}
	runClients(b, func(ctx context.Context, id string) error {
		_, err := s.DB().ExecContext(ctx, `INSERT IGNORE INTO raw (scope, id) VALUES (?, ?)`, "bench", id)
		return err
	})
}

func BenchmarkRawInsertIgnoreRows(b *testing.B) {
	s := openBench(b)
	if _, err := s.DB().Exec(`CREATE TABLE raw LIKE idem_records`); err != nil {
		b.Fatal(err)
	}
	const now = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
	runClients(b, func(ctx context.Context, id string) error {
		_, err := s.DB().ExecContext(ctx, `INSERT IGNORE INTO raw (scope, id, state, fingerprint, token, retention_us, created_us, expires_us)
			VALUES (?, ?, 1, '', 1, 86400000000, `+now+`, `+now+` + 30000000)`, "bench", id)
		return err
	})
}

func mysqlDatabase(b *testing.B) string { return testsvc.MySQLDatabase(b) }

func openBench(b *testing.B) *idemmysql.Store { return openBenchConfig(b, idemmysql.Config{}) }

func openBenchConfig(b *testing.B, cfg idemmysql.Config) *idemmysql.Store {
	b.Helper()
	s, err := idemmysql.Open(context.Background(), mysqlDatabase(b), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	s.DB().SetMaxOpenConns(benchClients)
	s.DB().SetMaxIdleConns(benchClients)
	return s
}
