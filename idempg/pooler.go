package idempg

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhq/idem"
)

// A pooler in transaction mode (PgBouncer's pool_mode = transaction, and poolers
// like it) gives a client connection a server session for one transaction at a
// time: session state does not last from one transaction to the next. Named
// prepared statements (pgx's default statement cache), LISTEN and session advisory
// locks then break. idem detects such a pooler where it matters, in two steps:
//
//  1. A pooler answers the connection's startup with a cancel key of its own, so the
//     process ID the client was given differs from the server's pg_backend_pid().
//     A plain TCP proxy (a port mapping, HAProxy) passes the server's through.
//  2. A client's server session changes, or another client is served by it: only
//     transaction (or statement) pooling moves a client between sessions or lends
//     one session to two clients. A pooler in session mode gives a client one
//     session for its life and never does either, and is not reported: session
//     state works there. The probe alternates statements on the connection and on a
//     second one: idle, a pooler hands the second the session the first just freed
//     (PgBouncer reuses the last freed one); busy, another client takes it, and the
//     first is moved to another session.
//
// What the probe reports is always true. It misses a transaction pooler only if, at
// every one of its rounds, another client takes the freed session and gives it back
// before the first connection's next statement; a first version that only waited
// for the second connection to be given the freed session missed it under a load
// of 8 writers (TestPgBouncerOutboxRelay, in CI). Only pools in a mode the pooler
// breaks are probed (unpooledMode): with the advised exec mode, New sends nothing
// extra.

// poolerProbes is how many rounds step 2 runs: two statements each.
const poolerProbes = 16

// poolerTimeout bounds the whole check.
const poolerTimeout = 10 * time.Second

// transactionPooled reports whether c reaches PostgreSQL through a pooler in
// transaction mode. It opens one more connection with c's configuration for step 2,
// only when step 1 found a pooler.
func transactionPooled(ctx context.Context, c *pgx.Conn) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, poolerTimeout)
	defer cancel()
	// Simple protocol: the probe must not leave a prepared statement behind, which
	// is the very thing a transaction pooler loses.
	pid := func(c *pgx.Conn) (uint32, error) {
		var p uint32
		err := c.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&p)
		return p, err
	}
	p1, err := pid(c)
	if err != nil || p1 == c.PgConn().PID() {
		return false, err
	}
	other, err := pgx.ConnectConfig(ctx, c.Config())
	if err != nil {
		return false, err
	}
	defer closeConn(other)
	for range poolerProbes {
		p2, err := pid(other)
		if err != nil || p2 == p1 { // c's session lent to another client
			return err == nil, err
		}
		p, err := pid(c)
		if err != nil || p != p1 { // c moved to another session
			return err == nil, err
		}
	}
	return false, nil
}

// unpooledMode returns the name of cfg's query exec mode if it relies on a
// statement outliving its round trip, which a transaction pooler breaks, and "" if
// not. cache_statement (pgx's default) keeps named prepared statements, which the
// next transaction's server session does not have ("prepared statement stmtcache_…
// already exists" or "does not exist"). describe_exec sends the unnamed statement's
// Parse and its Bind in two round trips, which the pooler may give to two server
// sessions: the Bind then runs another client's unnamed statement ("bind message
// supplies 5 parameters, but prepared statement "" requires 2"), or none.
// exec, simple_protocol and cache_describe send each statement in one round trip.
func unpooledMode(cfg *pgx.ConnConfig) string {
	switch cfg.DefaultQueryExecMode {
	case pgx.QueryExecModeCacheStatement:
		return "cache_statement"
	case pgx.QueryExecModeDescribeExec:
		return "describe_exec"
	}
	return ""
}

// statementCacheError is what a component on a pool (or database/sql handle) whose
// query exec mode a transaction pooler would break refuses to start with.
func statementCacheError(field, mode string) error {
	why := "pgx's statement cache (default_query_exec_mode=cache_statement, the default) keeps named prepared statements that the pooler loses between transactions"
	if mode != "cache_statement" {
		why = "default_query_exec_mode=" + mode + " sends a statement's Parse and Bind in two round trips, which the pooler may give to two server sessions"
	}
	return &idem.InputError{Field: field,
		Reason: "reaches PostgreSQL through a pooler in transaction mode (such as PgBouncer pool_mode = transaction), and " + why,
		Fix: "add default_query_exec_mode=exec (or simple_protocol) to the connection string, " +
			"or set ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec; or connect to the server directly"}
}

// checkPool refuses a pool whose query exec mode a transaction pooler in front of
// it would break (unpooledMode). A pool in another mode is not probed. probed is
// false when the check could not run (no connection): the component's first
// statement then reports the failure, and the check may be tried again.
func checkPool(ctx context.Context, pool *pgxpool.Pool, field string) (refusal error, probed bool) {
	if pool == nil {
		return nil, true
	}
	mode := unpooledMode(pool.Config().ConnConfig)
	if mode == "" {
		return nil, true
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, false
	}
	defer c.Release()
	// A probe that fails half-way (its second connection refused, say) is not
	// repeated at every transaction: the statement cache then fails at its first
	// clash, loudly.
	if pooled, _ := transactionPooled(ctx, c.Conn()); pooled {
		return statementCacheError(field, mode), true
	}
	return nil, true
}

// checkSQLDB is checkPool for a database/sql handle on pgx's stdlib driver; a
// handle on another driver is not probed.
func checkSQLDB(ctx context.Context, db *sql.DB, field string) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil // the component's first statement reports it
	}
	defer c.Close()
	var pooled bool
	var mode string
	_ = c.Raw(func(dc any) error {
		if sc, ok := dc.(*stdlib.Conn); ok {
			if mode = unpooledMode(sc.Conn().Config()); mode != "" {
				pooled, _ = transactionPooled(ctx, sc.Conn())
			}
		}
		return nil
	})
	if pooled {
		return statementCacheError(field, mode)
	}
	return nil
}

// poolCheck runs checkPool once per TxDB, at its first transaction: the components
// on a TxDB (outbox, inbox, queue, fences, sagas, audit) start by migrating in one,
// so they refuse at New. A check that could not connect is tried again next time.
type poolCheck struct {
	pool *pgxpool.Pool
	done atomic.Bool
	err  atomic.Pointer[error]
}

func (p *poolCheck) check(ctx context.Context) error {
	if p.done.Load() {
		if e := p.err.Load(); e != nil {
			return *e
		}
		return nil
	}
	err, probed := checkPool(ctx, p.pool, "idempg.TxDB pool")
	if err != nil {
		p.err.Store(&err)
	}
	if probed {
		p.done.Store(true)
	}
	return err
}
