package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/audit"
	"github.com/idemhq/idem/idemsql"
)

// BenchmarkAudit: one audit run over a window of 100,000 published messages on
// each producer database (the consumer's keys, nine in ten applied, in another
// SQLite database), beside the baseline of the same run: the outbox's keyset
// pages alone (AuditPublished, the same page size), which any audit must read.
// The ratio is what the consumer lookups and the counting cost on top.
//
//	go test -run '^$' -bench Audit -benchtime 3x ./audit/
func BenchmarkAudit(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		b.Run(kind, func(b *testing.B) {
			const n = 100_000
			ctx := context.Background()
			prod, cons := openDB(b, kind), openDB(b, "sqlite")
			base := time.Now().Add(-30 * time.Minute).UnixMilli()
			seedPublished(b, prod, "orders", n, base, func(i int) int64 { return base + int64(i/10) })
			applyKeys(b, cons, "ledger", n, func(i int) bool { return i%10 != 0 })
			side, err := audit.ConsumersIn(cons.tx, audit.Consumer{Name: "ledger", Topics: []string{"orders"}})
			if err != nil {
				b.Fatal(err)
			}
			a, err := audit.New(prod.tx, audit.Config{Logger: quiet}, side)
			if err != nil {
				b.Fatal(err)
			}
			pageOnly := func() int {
				st, read := prod.tx.Driver.Outbox(), 0
				afterAt, afterID := time.Now().Add(-time.Hour).UnixMilli()-1, int64(1<<62)
				for {
					got := 0
					err := prod.tx.Auto(ctx, func(q idemsql.Querier) error {
						return idemsql.EachRow(ctx, q, st.AuditPublished, []any{afterAt, afterID, time.Now().UnixMilli(), audit.DefaultPageSize}, func(r idemsql.Rows) error {
							var (
								id, created, pub int64
								msgID, topic     *string
								repairOf         *int64
							)
							if err := r.Scan(&id, &msgID, &topic, &created, &pub, &repairOf); err != nil {
								return err
							}
							afterAt, afterID, got = pub, id, got+1
							return nil
						})
					})
					if err != nil {
						b.Fatal(err)
					}
					if read += got; got < audit.DefaultPageSize {
						return read
					}
				}
			}
			var pageTime, auditTime time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if got := pageOnly(); got != n {
					b.Fatalf("the pages read %d rows, want %d", got, n)
				}
				pageTime += time.Since(start)
				start = time.Now()
				rep, err := a.Run(ctx)
				if err != nil {
					b.Fatal(err)
				}
				auditTime += time.Since(start)
				if rep.Scanned != n || rep.Rows[0].Missing != n/10 {
					b.Fatalf("audit read %d rows, found %d missing; want %d, %d", rep.Scanned, rep.Rows[0].Missing, n, n/10)
				}
			}
			b.ReportMetric(float64(n*b.N)/auditTime.Seconds(), "audited_rows/s")
			b.ReportMetric(float64(n*b.N)/pageTime.Seconds(), "paged_rows/s")
			b.ReportMetric(pageTime.Seconds()/auditTime.Seconds(), "ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}
