package effect_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
)

// BenchmarkEffectsRetention measures idem_effects on PostgreSQL across a long run:
// each iteration is one minute of a fake clock in which retentionPerMinute new
// effects complete, after which the sweeper (retention 10 minutes) runs, then a
// plain VACUUM, as autovacuum would (the test server runs with autovacuum off).
// With the sweeper the rows level off at 9 minutes' worth and the table's size
// stops growing once VACUUM has made the swept rows' space reusable; without it
// (sweep=off, the baseline) both grow with every minute. Run it with a fixed
// count, such as -benchtime 120x, to compare the two:
//
//	IDEM_REQUIRE_SERVICES=1 go test -p 1 -run '^$' -bench BenchmarkEffectsRetention -benchtime 120x ./effect/
//
// It reports the rows and bytes (pg_total_relation_size) at the end, and how much
// each grew over the second half of the run.
func BenchmarkEffectsRetention(b *testing.B) {
	for _, sweep := range []bool{true, false} {
		b.Run(fmt.Sprintf("sweep=%v", map[bool]string{true: "on", false: "off"}[sweep]), func(b *testing.B) {
			ctx := context.Background()
			db := sqltest.Postgres(b)
			clock := &chaos.Clock{}
			f, err := effect.New(ctx, db, effect.Config{Now: clock.Now})
			if err != nil {
				b.Fatal(err)
			}
			s, err := effect.NewSweeper(ctx, db, effect.SweepConfig{Retention: 10 * time.Minute, Now: clock.Now})
			if err != nil {
				b.Fatal(err)
			}
			size := func() (rows, bytes float64) {
				err := db.InTx(ctx, func(tx *sql.Tx) error {
					return db.Querier(tx).QueryRow(ctx, `SELECT COUNT(*), pg_total_relation_size('idem_effects') FROM idem_effects`).Scan(&rows, &bytes)
				})
				if err != nil {
					b.Fatal(err)
				}
				return rows, bytes
			}
			var halfRows, halfBytes float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				minute(b, f, i)
				clock.Jump(time.Minute)
				if sweep {
					if _, err := s.Sweep(ctx); err != nil {
						b.Fatal(err)
					}
				}
				vacuum(b, db)
				if i == b.N/2 {
					halfRows, halfBytes = size()
				}
				if i%10 == 0 {
					rows, bytes := size()
					b.Logf("minute %d: %.0f rows, %.0f kB, %d dead rows left by VACUUM", i, rows, bytes/1024, dead(b, db))
				}
			}
			rows, bytes := size()
			b.ReportMetric(rows, "rows")
			b.ReportMetric(bytes/1024, "kB")
			b.ReportMetric(100*(rows-halfRows)/max(halfRows, 1), "rows_growth_2nd_half_%")
			b.ReportMetric(100*(bytes-halfBytes)/max(halfBytes, 1), "kB_growth_2nd_half_%")
		})
	}
}

// vacuum runs a plain VACUUM of idem_effects (it cannot run in a transaction):
// what autovacuum does once enough rows are dead.
func vacuum(b *testing.B, db idemsql.TxDB[*sql.Tx]) {
	err := db.Auto(context.Background(), func(q idemsql.Querier) error {
		_, err := q.Exec(context.Background(), "VACUUM idem_effects")
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

// dead returns the dead rows of idem_effects that the last VACUUM could not
// remove: a transaction older than they are (any on the server) keeps them.
func dead(b *testing.B, db idemsql.TxDB[*sql.Tx]) (n int64) {
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		return db.Querier(tx).QueryRow(context.Background(),
			`SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'idem_effects'::regclass`).Scan(&n)
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// retentionPerMinute is how many effects complete in each minute of the run.
const retentionPerMinute = 100

// minute completes retentionPerMinute new effects of minute i, four at a time.
func minute(b *testing.B, f *effect.Fence[*sql.Tx], i int) {
	ok := func(context.Context, string) ([]byte, error) { return []byte(`{"charge":"ch_123","amount":4200}`), nil }
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for j := w; j < retentionPerMinute; j += 4 {
				if _, err := f.Do(context.Background(), fmt.Sprintf("order-%d-%d", i, j), "charge", ok); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
