package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
)

// nopSettler settles nothing: BenchmarkProcessSQLite measures the inbox, not a broker.
type nopSettler struct{}

func (nopSettler) Ack(context.Context) error                { return nil }
func (nopSettler) Nak(context.Context, time.Duration) error { return nil }

// BenchmarkProcessSQLite: batches of 64 fresh messages through Consumer.Process on
// SQLite (synchronous=NORMAL), each inserting one ledger row: the inbox's hot path
// without a broker, the figure tracing must not move when no TracerProvider is set.
func BenchmarkProcessSQLite(b *testing.B) { benchProcess(b, nil) }

// BenchmarkProcessSQLiteTraced: the same with the OpenTelemetry SDK sampling every
// delivery (a batch span processor, spans discarded by a no-op exporter).
func BenchmarkProcessSQLiteTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer tp.Shutdown(context.Background())
	benchProcess(b, tp)
}

func benchProcess(b *testing.B, tp trace.TracerProvider) {
	ctx := context.Background()
	s, err := idemsqlite.Open(ctx, filepath.Join(b.TempDir(), "inbox.db"), idemsqlite.Config{Synchronous: idemsqlite.SyncNormal})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.DB().ExecContext(ctx, "CREATE TABLE ledger (msg_id TEXT NOT NULL, amount BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	txdb, err := idemsql.SQLDB(ctx, s.DB())
	if err != nil {
		b.Fatal(err)
	}
	handle := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (msg_id, amount) VALUES ($1, 1)", m.ID)
		return err
	}
	c, err := inbox.New(ctx, nopSource{}, txdb, s, handle, inbox.Config{Consumer: "bench", BatchSize: benchBatch, TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	processBatches(b, c.Process)
}

// BenchmarkProcessPostgres: BenchmarkProcessSQLite on Postgres through pgx, where
// the store records a batch's keys in one statement (idem.TxResultRecorder);
// BenchmarkProcessPostgresTraced with the SDK sampling every delivery, so the
// applying spans' contexts are recorded with the keys.
func BenchmarkProcessPostgres(b *testing.B) { benchProcessPostgres(b, nil) }

func BenchmarkProcessPostgresTraced(b *testing.B) { benchProcessPostgres(b, testsvc.SDKTracing(b)) }

func benchProcessPostgres(b *testing.B, tp trace.TracerProvider) {
	ctx := context.Background()
	pool, store := pgxLedger(b, idempg.Config{TracerProvider: tp})
	c, err := inbox.New(ctx, nopSource{}, idempg.TxDB(pool), store, pgxCredit, inbox.Config{Consumer: "bench", BatchSize: benchBatch, TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	processBatches(b, c.Process)
}

// BenchmarkProcessPostgresBatch: BenchmarkProcessPostgres with inbox.NewBatch, the
// batch's ledger rows in one INSERT … SELECT FROM unnest; compare it with
// BenchmarkProcessPostgres of the same run.
func BenchmarkProcessPostgresBatch(b *testing.B) {
	ctx := context.Background()
	pool, store := pgxLedger(b, idempg.Config{})
	c, err := inbox.NewBatch(ctx, nopSource{}, idempg.TxDB(pool), store, pgxCreditAll, inbox.Config{Consumer: "bench", BatchSize: benchBatch})
	if err != nil {
		b.Fatal(err)
	}
	processBatches(b, c.Process)
}

// pgxCreditAll is pgxCredit for a batch: its ledger rows in one statement.
func pgxCreditAll(ctx context.Context, tx pgx.Tx, ms []idem.Message) error {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	_, err := tx.Exec(ctx, "INSERT INTO ledger (msg_id, amount) SELECT id, 1 FROM unnest($1::text[]) AS id", ids)
	return err
}

// pgxCredit is the Postgres benchmarks' handler: one ledger row per message.
func pgxCredit(ctx context.Context, tx pgx.Tx, m idem.Message) error {
	_, err := tx.Exec(ctx, "INSERT INTO ledger (msg_id, amount) VALUES ($1, 1)", m.ID)
	return err
}

// benchBatch is the inbox benchmarks' batch size.
const benchBatch = 64

// processBatches hands process batches of benchBatch fresh deliveries until b.N
// are done, and reports msgs/s.
func processBatches(b *testing.B, process func(context.Context, []idem.Delivery)) {
	const batch = benchBatch
	ctx := context.Background()
	payload := []byte(`{"Amount":1}`)
	ds := make([]idem.Delivery, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += batch {
		for i := range ds {
			ds[i] = idem.Delivery{Message: idem.Message{ID: fmt.Sprintf("m-%09d", n+i), Topic: "orders", Payload: payload},
				Attempt: 1, Settler: nopSettler{}}
		}
		process(ctx, ds)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// nopSource is never received from: the benchmark calls Process itself.
type nopSource struct{}

func (nopSource) Receive(ctx context.Context, _ int) ([]idem.Delivery, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (nopSource) Close() error { return nil }

// BenchmarkProcessPostgresUnbatched: the unbatched inbox (one message per
// transaction) through Consumer.Process on Postgres against the plain at-least-once
// transaction (BEGIN, the same INSERT, COMMIT), the two interleaved message by
// message so that a load shared with other processes weighs on both alike. It
// reports both rates and their ratio: the database's share of the brokers'
// BenchmarkInbox ratios, without the broker's noise.
func BenchmarkProcessPostgresUnbatched(b *testing.B) {
	ctx := context.Background()
	pool, store := pgxLedger(b, idempg.Config{})
	insert := pgxCredit
	db := idempg.TxDB(pool)
	c, err := inbox.New(ctx, nopSource{}, db, store, insert, inbox.Config{Consumer: "bench", BatchSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"Amount":1}`)
	var plain, inboxT time.Duration
	runPlain := func(m idem.Message) {
		start := time.Now()
		if err := db.InTx(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, m) }); err != nil {
			b.Fatal(err)
		}
		plain += time.Since(start)
	}
	runInbox := func(m idem.Message) {
		start := time.Now()
		c.Process(ctx, []idem.Delivery{{Message: m, Attempt: 1, Settler: nopSettler{}}})
		inboxT += time.Since(start)
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		m := idem.Message{ID: fmt.Sprintf("m-%09d", n), Topic: "orders", Payload: payload}
		if n%2 == 0 { // alternate which goes first
			runPlain(m)
			runInbox(m)
		} else {
			runInbox(m)
			runPlain(m)
		}
	}
	b.ReportMetric(float64(b.N)/plain.Seconds(), "plain-msgs/s")
	b.ReportMetric(float64(b.N)/inboxT.Seconds(), "inbox-msgs/s")
	b.ReportMetric(plain.Seconds()/inboxT.Seconds(), "ratio")
}

// BenchmarkProcessPostgresExpired: a flood of messages past their Idem-Deadline (a
// consumer back from an outage longer than its senders wait) against fresh ones,
// batches of benchBatch through Consumer.Process on Postgres, interleaved batch by
// batch. An expired message runs no handler and is written as a dead letter instead
// of a key record: the ratio says what discarding costs against applying.
func BenchmarkProcessPostgresExpired(b *testing.B) {
	ctx := context.Background()
	pool, store := pgxLedger(b, idempg.Config{})
	c, err := inbox.New(ctx, nopSource{}, idempg.TxDB(pool), store, pgxCredit, inbox.Config{Consumer: "bench", BatchSize: benchBatch, ReplayPollInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"Amount":1}`)
	expired := map[string]string{idem.HeaderDeadline: idem.FormatDeadline(time.Now().Add(-time.Minute))}
	var fresh, late time.Duration
	ds := make([]idem.Delivery, benchBatch)
	run := func(n int, headers map[string]string, into *time.Duration) {
		for i := range ds {
			ds[i] = idem.Delivery{Message: idem.Message{ID: fmt.Sprintf("m-%09d", n+i), Topic: "orders", Headers: headers, Payload: payload},
				Attempt: 1, Settler: nopSettler{}}
		}
		start := time.Now()
		c.Process(ctx, ds)
		*into += time.Since(start)
	}
	b.ResetTimer()
	for n := 0; n < b.N; n += benchBatch {
		run(2*n, nil, &fresh)
		run(2*n+benchBatch, expired, &late)
	}
	done := float64((b.N + benchBatch - 1) / benchBatch * benchBatch)
	b.ReportMetric(done/fresh.Seconds(), "fresh-msgs/s")
	b.ReportMetric(done/late.Seconds(), "expired-msgs/s")
	b.ReportMetric(fresh.Seconds()/late.Seconds(), "ratio")
}
