package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/queue"
)

// BenchmarkStatus measures Status (the query behind Run's gauges, GET
// /api/queue and `idem queue status`) over a backlog of 100 000 unfinished
// messages in 10 topics.
func BenchmarkStatus(b *testing.B) {
	for _, kind := range kinds {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			d := openDB(b, kind)
			q := newQueue(b, d, queue.Config{})
			for batch := range 100 {
				err := d.tx.InTx(ctx, func(tx *sql.Tx) error {
					jobs := make([]queue.Job, 1000)
					for i := range jobs {
						jobs[i] = queue.Job{Message: idem.Message{ID: fmt.Sprint(batch*1000 + i), Topic: fmt.Sprint("t", i%10)}}
					}
					_, err := q.InsertTx(ctx, tx, jobs...)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				if st, err := q.Status(ctx); err != nil || len(st) != 10 {
					b.Fatal(st, err)
				}
			}
		})
	}
}

// BenchmarkInsertMetrics measures InsertTx of one message a transaction on
// SQLite without and with a Registerer: the cost of counting.
func BenchmarkInsertMetrics(b *testing.B) {
	for _, withMetrics := range []bool{false, true} {
		b.Run(fmt.Sprint("metrics=", withMetrics), func(b *testing.B) {
			ctx := context.Background()
			d := openDB(b, "sqlite")
			cfg := queue.Config{}
			if withMetrics {
				cfg.Registerer = prometheus.NewRegistry()
			}
			q := newQueue(b, d, cfg)
			i := 0
			for b.Loop() {
				i++
				err := d.tx.InTx(ctx, func(tx *sql.Tx) error {
					_, err := q.InsertTx(ctx, tx, queue.Job{Message: idem.Message{ID: fmt.Sprint(i), Topic: "t"}})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
