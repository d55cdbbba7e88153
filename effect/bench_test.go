package effect_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
)

// BenchmarkFence compares an effect through the fence (two short transactions
// around the call) with the bare call to the same local HTTP service: the baseline.
func BenchmarkFence(b *testing.B) {
	call := benchCall(b)
	b.Run("bare-call", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := call(context.Background(), fmt.Sprint(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run("fence-"+db, func(b *testing.B) {
			f, err := effect.New(context.Background(), benchDB(b, db), effect.Config{})
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			prefix := testsvc.UniqueName("k")
			for b.Loop() {
				if _, err := f.Do(context.Background(), fmt.Sprintf("%s-%d", prefix, n.Add(1)), "charge", call); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchDB(b *testing.B, name string) idemsql.TxDB[*sql.Tx] {
	if name == "sqlite" {
		return sqltest.SQLite(b)
	}
	return sqltest.Postgres(b)
}

// benchCall returns a call to a local HTTP service that answers at once: the bare
// call every fence figure is compared with.
func benchCall(b *testing.B) effect.Call {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	}))
	b.Cleanup(srv.Close)
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	return func(ctx context.Context, key string) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
}

// BenchmarkFenceConcurrent is BenchmarkFence with 16 concurrent callers, each a new
// effect: the bare call, then the fence on Postgres and MariaDB.
func BenchmarkFenceConcurrent(b *testing.B) {
	const clients = 16
	call := benchCall(b)
	report := func(b *testing.B) { b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "effects/s") }
	b.Run("bare-call", func(b *testing.B) {
		testsvc.RunClients(b, clients, func(ctx context.Context, id string) error {
			_, err := call(ctx, id)
			return err
		})
		report(b)
	})
	for _, db := range []string{"postgres", "mysql"} {
		b.Run("fence-"+db, func(b *testing.B) {
			// database/sql keeps 2 idle connections by default: 16 callers would
			// open and close connections all the time.
			var sdb *sql.DB
			if db == "mysql" {
				sdb = testsvc.MySQLDB(b)
			} else {
				sdb = testsvc.PostgresDB(b)
			}
			sdb.SetMaxIdleConns(2 * clients)
			txdb, err := idemsql.SQLDB(context.Background(), sdb)
			if err != nil {
				b.Fatal(err)
			}
			runFence(b, clients, txdb, call, report)
		})
	}
	// The same on pgx's own pool (idempg.TxDB), as a Postgres application would
	// run it without database/sql.
	b.Run("fence-pgx", func(b *testing.B) {
		runFence(b, clients, idempg.TxDB(testsvc.PostgresPool(b)), call, report)
	})
	// The keyed path (DoKeyed: a read, the call, one write) for a downstream that
	// deduplicates by the key, on both Postgres pools.
	b.Run("keyed-postgres", func(b *testing.B) {
		sdb := testsvc.PostgresDB(b)
		sdb.SetMaxIdleConns(2 * clients)
		txdb, err := idemsql.SQLDB(context.Background(), sdb)
		if err != nil {
			b.Fatal(err)
		}
		runKeyed(b, clients, txdb, call, report)
	})
	b.Run("keyed-pgx", func(b *testing.B) {
		runKeyed(b, clients, idempg.TxDB(testsvc.PostgresPool(b)), call, report)
	})
	// The same on sessions that commit asynchronously (synchronous_commit = off):
	// what waiting for the record's WAL flush costs the keyed path. Not a setting
	// idem makes: a database crash may lose the last records it reported.
	b.Run("keyed-pgx-async-commit", func(b *testing.B) {
		cs, _ := testsvc.PostgresSchema(b)
		cfg, err := pgxpool.ParseConfig(cs)
		if err != nil {
			b.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		runKeyed(b, clients, idempg.TxDB(pool), call, report)
	})
	// Write-behind (Config.KeyedWriteBehind): DoKeyed returns once the call
	// answers, and its record is written with others' in the background. The
	// figure includes writing every record: the clock stops after Flush.
	b.Run("keyed-pgx-write-behind", func(b *testing.B) {
		runKeyedWith(b, clients, idempg.TxDB(testsvc.PostgresPool(b)), effect.Config{KeyedWriteBehind: true}, call, report)
	})
}

// BenchmarkKeyedTx is the keyed path inside the caller's transaction
// (DoKeyedTx), 16 callers on pgx, beside its baseline: the same transaction
// (one insert of the caller's own, one commit) around the bare call.
func BenchmarkKeyedTx(b *testing.B) {
	const clients = 16
	call := benchCall(b)
	// Each caller holds a connection through its call: a pool of pgxpool's default
	// size (4 on 2 cores) would time the pool, not the path.
	ctx := context.Background()
	cs, _ := testsvc.PostgresSchema(b)
	cfg, err := pgxpool.ParseConfig(cs)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 2 * clients
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	db := idempg.TxDB(pool)
	table := testsvc.UniqueName("orders")
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (id TEXT PRIMARY KEY, charge BYTEA)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+table) })
	f, err := effect.New(ctx, db, effect.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, keyed := range []bool{false, true} {
		name := map[bool]string{false: "bare-call-in-tx", true: "keyed-tx-pgx"}[keyed]
		b.Run(name, func(b *testing.B) {
			prefix := testsvc.UniqueName(name)
			testsvc.RunClients(b, clients, func(ctx context.Context, id string) error {
				return db.InTx(ctx, func(tx pgx.Tx) error {
					var res []byte
					var err error
					if keyed {
						res, err = f.DoKeyedTx(ctx, tx, prefix+id, "charge", call)
					} else {
						res, err = call(ctx, idemkey.Derive(prefix+id, "charge"))
					}
					if err != nil {
						return err
					}
					_, err = tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1, $2)", prefix+id, res)
					return err
				})
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "effects/s")
		})
	}
}

// runKeyed is runFence through DoKeyed.
func runKeyed[Tx any](b *testing.B, clients int, db idemsql.TxDB[Tx], call effect.Call, report func(*testing.B)) {
	runKeyedWith(b, clients, db, effect.Config{}, call, report)
}

// runKeyedWith is runKeyed on a Fence configured by cfg; the time includes
// Flush.
func runKeyedWith[Tx any](b *testing.B, clients int, db idemsql.TxDB[Tx], cfg effect.Config, call effect.Call, report func(*testing.B)) {
	f, err := effect.New(context.Background(), db, cfg)
	if err != nil {
		b.Fatal(err)
	}
	prefix := testsvc.UniqueName("k")
	testsvc.RunClients(b, clients, func(ctx context.Context, id string) error {
		_, err := f.DoKeyed(ctx, prefix+id, "charge", call)
		return err
	})
	if err := f.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	report(b)
	b.ReportMetric(float64(effect.GroupBatches(f))/float64(b.N), "batches/effect")
	b.ReportMetric(float64(effect.KeyedStatements(f))/float64(b.N), "stmts/effect")
}

// runFence times clients concurrent callers, each running a new effect through a
// fence on db, and reports effects/s and the batch statements per effect.
func runFence[Tx any](b *testing.B, clients int, db idemsql.TxDB[Tx], call effect.Call, report func(*testing.B)) {
	f, err := effect.New(context.Background(), db, effect.Config{})
	if err != nil {
		b.Fatal(err)
	}
	prefix := testsvc.UniqueName("k")
	testsvc.RunClients(b, clients, func(ctx context.Context, id string) error {
		_, err := f.Do(ctx, prefix+id, "charge", call)
		return err
	})
	report(b)
	b.ReportMetric(float64(effect.GroupBatches(f))/float64(b.N), "batches/effect")
}
