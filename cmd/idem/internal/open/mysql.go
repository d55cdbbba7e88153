package open

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net/url"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/internal/redact"
	"github.com/idemhq/idem/outbox"
)

// parseMySQLStore checks --store mysql://user:pass@host:3306/db[?param=…] without
// connecting.
func parseMySQLStore(s StoreSpec) (StoreSpec, error) {
	s.Kind = "mysql"
	if _, err := idemmysql.DSN(s.Raw); err != nil {
		return s, fmt.Errorf("--store %s: %w", s.Desc, err)
	}
	s.Desc = mysqlDesc(s.Raw)
	return s, nil
}

// mysqlDesc names a mysql:// URL in messages without its credentials.
func mysqlDesc(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return fmt.Sprintf("mysql (%s%s)", u.Host, u.Path)
	}
	return redact.URL(raw)
}

// openMySQLStore is serve's --store mysql://…: an idemmysql.Store on its own pool.
func openMySQLStore(ctx context.Context, s StoreSpec, reg prometheus.Registerer) (idem.Store, func(), error) {
	st, err := idemmysql.Open(ctx, s.Raw, idemmysql.Config{Registerer: reg})
	if err != nil {
		return nil, nil, fmt.Errorf("--store %s: %w", s.Desc, err)
	}
	return st, func() { st.Close() }, nil
}

// parseMySQLDB checks relay's --db mysql://… without connecting.
func parseMySQLDB(d DBSpec) (DBSpec, error) {
	if _, err := idemmysql.DSN(d.Raw); err != nil {
		return d, fmt.Errorf("--db %s: %s", d.Desc, redact.String(err.Error()))
	}
	d.Desc = mysqlDesc(d.Raw)
	return d, nil
}

// openMySQL opens a handle on the mysql:// URL raw (idemmysql.DSN) and checks that
// the server answers; flag and desc name the URL in errors.
func openMySQL(ctx context.Context, flag, desc, raw string) (*sql.DB, error) {
	dsn, err := idemmysql.DSN(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %s", flag, desc, redact.String(err.Error()))
	}
	db, err := sql.Open("mysql", dsn)
	if err == nil {
		if err = db.PingContext(ctx); err != nil {
			db.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: connect: %w", flag, desc, redact.Error(err))
	}
	return db, nil
}

// openMySQLRelay is relay's --db mysql://…: the outbox on a pool, polled every
// --poll (MySQL has no LISTEN/NOTIFY; services in other processes cannot wake it).
func openMySQLRelay(ctx context.Context, db DBSpec, sink idem.Sink, cfg outbox.RelayConfig) (*RelayDB, error) {
	mdb, err := openMySQL(ctx, "--db", db.Desc, db.Raw)
	if err != nil {
		return nil, err
	}
	rd := &RelayDB{Close: func() { mdb.Close() }}
	txdb := idemmysql.TxDB(mdb)
	ob, err := outbox.New(ctx, txdb, outbox.Config{})
	if err != nil {
		rd.Close()
		return nil, fmt.Errorf("--db %s: %w", db.Desc, redact.Error(err))
	}
	return withRelay(rd, ob, txdb, sink, cfg)
}

// openVerifyMySQL is verify's --db mysql://…: a fresh database on that server,
// dropped after unless keep, reached through a chaos.Proxy so the run can cut the
// connections.
func openVerifyMySQL(ctx context.Context, raw string, keep bool) (*Database, error) {
	desc := mysqlDesc(raw)
	admin, err := openMySQL(ctx, "--db", desc, raw)
	if err != nil {
		return nil, err
	}
	dsn, _ := idemmysql.DSN(raw) // openMySQL checked it
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		admin.Close()
		return nil, fmt.Errorf("--db %s: %s", desc, redact.String(err.Error()))
	}
	name := "idem_verify_" + RandomHex(6)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		return nil, fmt.Errorf("--db %s: create the run's database: %w", desc, redact.Error(err))
	}
	// The admin handle idles until the drop: keep no connection open meanwhile,
	// which a restart of the server (--db-crash) would leave dead for the driver
	// to log about ("closing bad idle connection").
	admin.SetMaxIdleConns(0)
	drop := func() {
		if !keep {
			_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name)
		}
		admin.Close()
	}
	proxy, err := chaos.NewProxy("mysql", cfg.Addr)
	if err != nil {
		drop()
		return nil, err
	}
	cfg.Addr, cfg.DBName = proxy.Addr(), name
	// The run cuts these connections on purpose: the driver's log lines about them
	// ("unexpected EOF", "bad connection") would only bury the report.
	cfg.Logger = log.New(io.Discard, "", 0)
	conn, err := mysql.NewConnector(cfg)
	var db *sql.DB
	var s *idemmysql.Store
	if err == nil {
		db = sql.OpenDB(conn)
		db.SetMaxOpenConns(32)
		s, err = idemmysql.New(ctx, db, idemmysql.Config{})
	}
	return proxiedVerifyDB("mysql (database "+name+")", desc, db, s, proxy, drop, err)
}
