package open

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for verify's postgres:// URLs
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/redact"
	"github.com/idemhq/idem/outbox"
)

// Postgres connects a pool to the postgres:// URL raw and checks that the
// server answers; flag and desc name the URL in errors.
func Postgres(ctx context.Context, flag, desc, raw string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, raw)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("%s %s: connect: %w", flag, desc, err)
	}
	return pool, nil
}

// openPostgresStore is serve's --store postgres://…: an idempg.Store on a pool.
func openPostgresStore(ctx context.Context, s StoreSpec, reg prometheus.Registerer) (idem.Store, func(), error) {
	pool, err := Postgres(ctx, "--store", s.Desc, s.Raw)
	if err != nil {
		return nil, nil, err
	}
	st, err := idempg.New(ctx, pool, idempg.Config{Registerer: reg})
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("--store %s: %w", s.Desc, err)
	}
	return st, pool.Close, nil
}

// openPostgresRelay is relay's --db postgres://…: the outbox on a pool, the relay
// woken by LISTEN/NOTIFY.
func openPostgresRelay(ctx context.Context, db DBSpec, sink idem.Sink, cfg outbox.RelayConfig) (*RelayDB, error) {
	pool, err := Postgres(ctx, "--db", db.Desc, db.Raw)
	if err != nil {
		return nil, err
	}
	n := idempg.NewNotifier(pool, idempg.DefaultChannel)
	rd := &RelayDB{Close: func() { n.Close(); pool.Close() }}
	txdb := idempg.TxDB(pool)
	ob, err := outbox.New(ctx, txdb, outbox.Config{})
	if err == nil {
		// Listen before the first round: every commit after it wakes the relay, and
		// every commit before it is seen by that round.
		err = n.Listen(ctx)
		if err != nil && !idem.IsRetryable(err) && ctx.Err() == nil {
			// Behind a pooler in transaction mode LISTEN cannot work: the relay
			// logs that at start and polls (correct, slower).
			err = nil
		}
	}
	if err != nil {
		rd.Close()
		return nil, fmt.Errorf("--db %s: %w", db.Desc, err)
	}
	cfg.Notifier = n
	return withRelay(rd, ob, txdb, sink, cfg)
}

// openVerifyPostgres is verify's --db postgres://…: a fresh schema, dropped after
// unless keep, reached through a chaos.Proxy so the run can cut the connections.
func openVerifyPostgres(ctx context.Context, raw string, keep bool) (*Database, error) {
	return openVerifyPostgresVia(ctx, raw, keep, true)
}

// VerifyPostgresDirect is a run's fresh schema on the servers of raw, reached
// directly, not through a proxy: raw may name several hosts
// (postgres://u@h1:p1,h2:p2/db?target_session_attrs=read-write), which pgx
// follows to the primary, as verify --failover needs. The run injects no
// connection cuts on it (Database.Proxy is nil).
func VerifyPostgresDirect(ctx context.Context, raw string, keep bool) (*Database, error) {
	return openVerifyPostgresVia(ctx, raw, keep, false)
}

func openVerifyPostgresVia(ctx context.Context, raw string, keep, proxied bool) (*Database, error) {
	u, err := url.Parse(raw)
	if err != nil { // checkURL refused it already
		return nil, fmt.Errorf("--db %q: not a URL: use postgres://user@host:5432/db", redact.URL(raw))
	}
	admin, err := sql.Open("pgx", raw)
	if err != nil {
		return nil, fmt.Errorf("--db %s: %w", redact.URL(raw), redact.Error(err))
	}
	schema := "idem_verify_" + RandomHex(6)
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		return nil, fmt.Errorf("--db %s: create the run's schema: %w", redact.URL(raw), redact.Error(err))
	}
	drop := func() {
		if !keep {
			_, _ = admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		}
		admin.Close()
	}
	var proxy *chaos.Proxy
	if proxied {
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "5432")
		}
		if proxy, err = chaos.NewProxy("postgres", host); err != nil {
			drop()
			return nil, err
		}
		u.Host = proxy.Addr()
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err == nil {
		db.SetMaxOpenConns(32)
	}
	var s *idempg.SQLStore
	if err == nil {
		s, err = idempg.NewSQL(ctx, db, idempg.Config{})
	}
	return proxiedVerifyDB("postgres (schema "+schema+")", redact.URL(raw), db, s, proxy, drop, err)
}
