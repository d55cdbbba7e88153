package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/migrate"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/stream"
)

type noSource struct{}

func (noSource) Receive(ctx context.Context, _ int) ([]idem.Delivery, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (noSource) Close() error { return nil }

// Every constructor that owns tables, with SkipMigrate on a database that lacks
// them, runs no DDL and fails with a BehindError naming its first missing
// migration; after Up it succeeds.
func TestSkipMigrateChecksEveryComponent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	db := idemsqlite.TxDB(raw)
	pgcs, _ := testsvc.PostgresSchema(t)
	pgdb := handle(t, "pgx", pgcs)
	pgraw, err := sql.Open("pgx", pgcs)
	if err != nil {
		t.Fatal(err)
	}
	defer pgraw.Close()

	type ctor struct {
		name    string
		missing string
		open    func() error
	}
	ctors := []ctor{
		{"idemsqlite", "001_records", func() error {
			s, err := idemsqlite.New(ctx, raw, idemsqlite.Config{SkipMigrate: true})
			if err == nil {
				s.Close()
			}
			return err
		}},
		{"idempg", "001_records", func() error {
			_, err := idempg.NewSQL(ctx, pgraw, idempg.Config{SkipMigrate: true, Table: "app_keys"})
			return err
		}},
		{"outbox", "001_outbox", func() error { _, err := outbox.New(ctx, db, outbox.Config{SkipMigrate: true}); return err }},
		{"effect", "001_effects", func() error { _, err := effect.New(ctx, db, effect.Config{SkipMigrate: true}); return err }},
		{"saga", "001_sagas", func() error { _, err := saga.New(ctx, db, saga.Config{SkipMigrate: true}); return err }},
		{"stream", "001_stream", func() error {
			_, err := stream.NewSQLStore(ctx, db, stream.SQLConfig{SkipMigrate: true})
			return err
		}},
		{"idemseq", "001_sequences", func() error {
			_, err := idemseq.NewSQLTracker(ctx, db, idemseq.Config{SkipMigrate: true})
			return err
		}},
	}
	for _, c := range ctors {
		err := c.open()
		if !errors.Is(err, migrate.ErrBehind) || !strings.Contains(err.Error(), c.missing) {
			t.Errorf("%s with SkipMigrate on an empty database = %v, want ErrBehind naming %s", c.name, err, c.missing)
		}
	}
	if tableExists(t, db, "idem_migrations") || tableExists(t, db, "idem_outbox") {
		t.Fatal("a constructor with SkipMigrate created tables")
	}
	// The inbox needs a store, which needs the records table.
	if err := migrate.Up(ctx, db, migrate.Records(migrate.DefaultRecordsTable)); err != nil {
		t.Fatal(err)
	}
	store, err := idemsqlite.New(ctx, raw, idemsqlite.Config{SkipMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	handler := func(context.Context, *sql.Tx, idem.Message) error { return nil }
	ctors = append(ctors, ctor{"inbox", "001_dead_letters", func() error {
		_, err := inbox.New(ctx, noSource{}, db, idem.TxStore[*sql.Tx](store), handler, inbox.Config{Consumer: "c", SkipMigrate: true})
		return err
	}})
	if err := ctors[len(ctors)-1].open(); !errors.Is(err, migrate.ErrBehind) {
		t.Errorf("inbox with SkipMigrate before Up = %v, want ErrBehind", err)
	}
	if err := migrate.Up(ctx, db, migrate.All(idemsql.SQLite)...); err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(ctx, pgdb, migrate.Records("app_keys")); err != nil {
		t.Fatal(err)
	}
	for _, c := range ctors {
		if err := c.open(); err != nil {
			t.Errorf("%s with SkipMigrate after Up: %v", c.name, err)
		}
	}
}
