package otelx_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/testsvc"
)

// tracedStore is a store of one backend opened with a test's provider, and its
// database for the Tx variants (nil for memory and Redis).
type tracedStore struct {
	system string
	open   func(t *testing.T, tp trace.TracerProvider) (idem.Store, *sql.DB)
}

var tracedStores = []tracedStore{
	{"memory", func(t *testing.T, tp trace.TracerProvider) (idem.Store, *sql.DB) {
		s, err := idemmem.New(idemmem.Config{TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		return s, nil
	}},
	{"sqlite", func(t *testing.T, tp trace.TracerProvider) (idem.Store, *sql.DB) {
		s, err := idemsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"), idemsqlite.Config{TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, s.DB()
	}},
	{"postgresql", func(t *testing.T, tp trace.TracerProvider) (idem.Store, *sql.DB) {
		db := testsvc.PostgresDB(t)
		s, err := idempg.NewSQL(context.Background(), db, idempg.Config{TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		return s, db
	}},
	{"postgresql", func(t *testing.T, tp trace.TracerProvider) (idem.Store, *sql.DB) { // pgx, with ClaimBatch
		s, err := idempg.New(context.Background(), testsvc.PostgresPool(t), idempg.Config{TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		return s, nil
	}},
	{"mysql", func(t *testing.T, tp trace.TracerProvider) (idem.Store, *sql.DB) {
		db := testsvc.MySQLDB(t)
		s, err := idemmysql.New(context.Background(), db, idemmysql.Config{Table: testsvc.UniqueName("idem_records_"), TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		return s, db
	}},
	{"redis", func(t *testing.T, tp trace.TracerProvider) (idem.Store, *sql.DB) {
		prefix := testsvc.RedisPrefix(t)
		client := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
		t.Cleanup(func() { client.Close() })
		s, err := idemredis.New(client, idemredis.Config{Prefix: prefix, TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		return s, nil
	}},
}

// TestStoreSpans: on every backend, each Claim, Complete, Release and ClaimBatch is
// a span, child of the caller's, with the key, the outcome, the token and the
// backend's db.system.name; the Tx variants say idem.tx.
func TestStoreSpans(t *testing.T) {
	t.Parallel()
	for i, b := range tracedStores {
		t.Run(fmt.Sprint(b.system, "-", i), func(t *testing.T) {
			t.Parallel()
			tr := newTracing(t)
			s, db := b.open(t, tr.tp)
			ctx, root := tr.tp.Tracer("t").Start(context.Background(), "caller")
			k := idem.Key{Scope: "orders", ID: "k-1"}
			first, err := s.Claim(ctx, idem.Claim{Key: k})
			if err != nil || first.Outcome != idem.Acquired {
				t.Fatalf("first claim: %v, %v", first.Outcome, err)
			}
			if _, err := s.Claim(ctx, idem.Claim{Key: k}); err != nil {
				t.Fatal(err)
			}
			if err := s.(idem.Renewer).Renew(ctx, k, first.Token, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := s.Complete(ctx, k, first.Token, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Claim(ctx, idem.Claim{Key: k}); err != nil {
				t.Fatal(err)
			}
			relErr := s.Release(ctx, k, first.Token+1000) // not the holder's token
			if bc, ok := s.(idem.BatchClaimer); ok {
				if _, err := bc.ClaimBatch(ctx, []idem.Claim{{Key: k}, {Key: idem.Key{Scope: "orders", ID: "k-2"}}}); err != nil {
					t.Fatal(err)
				}
			}
			root.End()

			caller := tr.one(t, "caller")
			claims := tr.named(otelx.SpanStoreClaim)
			if len(claims) != 3 {
				t.Fatalf("%d claim spans, want 3; spans: %v", len(claims), tr.names())
			}
			for i, want := range []string{"acquired", "in_progress", "replayed"} {
				wantChild(t, claims[i], caller)
				wantAttrs(t, claims[i], map[attribute.Key]any{otelx.KeyDBSystem: b.system, otelx.KeyScope: "orders",
					otelx.KeyKey: "k-1", otelx.KeyOutcome: want})
			}
			wantAttrs(t, claims[0], map[attribute.Key]any{otelx.KeyToken: first.Token})
			wantAttrs(t, claims[1], map[attribute.Key]any{otelx.KeyDuplicate: true})
			if _, ok := attr(claims[0], otelx.KeyDuplicate); ok {
				t.Errorf("the acquiring claim's span says idem.duplicate")
			}
			complete := tr.one(t, otelx.SpanStoreComplete)
			wantChild(t, complete, caller)
			wantAttrs(t, complete, map[attribute.Key]any{otelx.KeyDBSystem: b.system, otelx.KeyKey: "k-1", otelx.KeyToken: first.Token})
			renew := tr.one(t, otelx.SpanStoreRenew)
			wantChild(t, renew, caller)
			wantAttrs(t, renew, map[attribute.Key]any{otelx.KeyDBSystem: b.system, otelx.KeyKey: "k-1", otelx.KeyToken: first.Token})
			release := tr.one(t, otelx.SpanStoreRelease)
			wantChild(t, release, caller)
			if (relErr != nil) != (release.Status.Code.String() == "Error") {
				t.Errorf("Release returned %v and its span's status is %v", relErr, release.Status)
			}
			if _, ok := s.(idem.BatchClaimer); ok {
				batch := tr.one(t, otelx.SpanStoreBatch)
				wantChild(t, batch, caller)
				wantAttrs(t, batch, map[attribute.Key]any{otelx.KeyDBSystem: b.system, otelx.KeyBatchSize: 2, otelx.KeyBatchDuplicates: 1})
			}
			if db != nil {
				testTxSpans(t, tr, s, db)
			}
		})
	}
}

// testTxSpans: ClaimTx and CompleteTx spans are children of the caller's span and
// say idem.tx.
func testTxSpans(t *testing.T, tr tracing, s idem.Store, db *sql.DB) {
	t.Helper()
	ts, ok := s.(idem.TxStore[*sql.Tx])
	if !ok {
		t.Fatalf("%T is not a TxStore[*sql.Tx]", s)
	}
	tr.exp.Reset()
	ctx, root := tr.tp.Tracer("t").Start(context.Background(), "tx-caller")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := idem.Key{Scope: "orders", ID: "tx-1"}
	res, err := ts.ClaimTx(ctx, tx, idem.Claim{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.CompleteTx(ctx, tx, k, res.Token, nil); err != nil {
		t.Fatal(err)
	}
	rec, recorder := s.(idem.TxRecorder[*sql.Tx])
	if recorder {
		// The inbox's batch path: two fresh keys and the one just completed.
		out, err := rec.RecordTx(ctx, tx, []idem.Claim{{Key: k}, {Key: idem.Key{Scope: "orders", ID: "tx-2"}}, {Key: idem.Key{Scope: "orders", ID: "tx-3"}}})
		if err != nil || out[0] != idem.Replayed {
			t.Fatalf("RecordTx: %v, %v", out, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	root.End()
	caller := tr.one(t, "tx-caller")
	if recorder {
		sp := tr.one(t, otelx.SpanStoreRecord)
		wantChild(t, sp, caller)
		wantAttrs(t, sp, map[attribute.Key]any{otelx.KeyTx: true, otelx.KeyBatchSize: 3, otelx.KeyBatchDuplicates: 1, otelx.KeyScope: "orders"})
	}
	for _, name := range []string{otelx.SpanStoreClaim, otelx.SpanStoreComplete} {
		sp := tr.one(t, name)
		wantChild(t, sp, caller)
		wantAttrs(t, sp, map[attribute.Key]any{otelx.KeyTx: true, otelx.KeyKey: "tx-1", otelx.KeyToken: res.Token})
	}
}

// TestMySQLGroupClaimSpans: concurrent claims that the MySQL store's group writer
// may answer with one statement each keep a span of their own, a child of their
// own caller's span.
func TestMySQLGroupClaimSpans(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	s, _ := tracedStores[4].open(t, tr.tp)
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, root := tr.tp.Tracer("t").Start(context.Background(), fmt.Sprintf("caller-%d", i))
			defer root.End()
			if _, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "g", ID: fmt.Sprintf("k-%d", i)}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	claims := tr.named(otelx.SpanStoreClaim)
	if len(claims) != n {
		t.Fatalf("%d claim spans, want %d", len(claims), n)
	}
	byKey := map[string]tracetest.SpanStub{}
	for _, c := range claims {
		v, _ := attr(c, otelx.KeyKey)
		byKey[v.AsString()] = c
	}
	for i := range n {
		c, ok := byKey[fmt.Sprintf("k-%d", i)]
		if !ok {
			t.Fatalf("no claim span for k-%d", i)
		}
		wantChild(t, c, tr.one(t, fmt.Sprintf("caller-%d", i)))
		wantAttrs(t, c, map[attribute.Key]any{otelx.KeyOutcome: "acquired"})
	}
}
