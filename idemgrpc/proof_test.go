package idemgrpc_test

// The proof of idemgrpc against the real thing: a grpc-go server on loopback,
// grpc-go's own retry policy (or the A6 hedging that grpctest.Hedge emulates), the
// client interceptor, and every store: memory, SQLite, PostgreSQL (pgx and
// database/sql), MySQL/MariaDB and Redis behind UnaryServerInterceptor, and the
// SQL stores behind AtomicUnaryServerInterceptor too, where the handler writes its
// order row through TxFrom and the proof counts rows in the database. Every
// logical call has its own customer, so the count of orders (or rows) of a
// customer is how many times that call took effect. The scenarios are in
// proof_*_test.go; this file holds the stores and the fixtures they share.

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
	"github.com/idemhq/idem/internal/testsvc"
)

// proofTarget is one store, in one of the two modes of the server interceptor.
type proofTarget struct {
	name   string
	atomic bool // AtomicUnaryServerInterceptor; otherwise UnaryServerInterceptor
	// create makes a fresh place for the store and returns where it is (a file, a
	// Postgres schema's connection string, a MySQL database's URL, a Redis key
	// prefix), or "" for the memory store, which no other process can open.
	// A service that is down skips the test, or fails it under
	// IDEM_REQUIRE_SERVICES=1 (testsvc).
	create func(t testing.TB) string
	// open opens the store at loc, closed when t ends: in the test's process, and
	// in the server process of TestProofKilledServer.
	open func(t *testing.T, loc string) *proofEnv
}

// proofTargets are the stores and modes every scenario runs on.
var proofTargets = []proofTarget{
	{name: "memory", create: func(testing.TB) string { return "" }, open: func(t *testing.T, _ string) *proofEnv {
		return proofPlainEnv(proofMust(idemmem.New(idemmem.Config{}))(t))
	}},
	{name: "sqlite", create: proofSQLiteFile, open: func(t *testing.T, loc string) *proofEnv { return proofPlainEnv(proofOpenSQLite(t, loc)) }},
	{name: "postgres-pgx", create: proofPgSchema, open: func(t *testing.T, loc string) *proofEnv {
		return proofPlainEnv(proofMust(idempg.New(context.Background(), proofOpenPool(t, loc), idempg.Config{}))(t))
	}},
	{name: "postgres-sql", create: proofPgSchema, open: func(t *testing.T, loc string) *proofEnv {
		return proofPlainEnv(proofMust(idempg.NewSQL(context.Background(), proofOpenPgSQL(t, loc), idempg.Config{}))(t))
	}},
	{name: "mysql", create: testsvc.MySQLDatabase, open: func(t *testing.T, loc string) *proofEnv { return proofPlainEnv(proofOpenMySQL(t, loc)) }},
	{name: "redis", create: testsvc.RedisPrefix, open: func(t *testing.T, loc string) *proofEnv {
		client := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
		t.Cleanup(func() { client.Close() })
		return proofPlainEnv(proofMust(idemredis.New(client, idemredis.Config{Prefix: loc}))(t))
	}},
	{name: "atomic-sqlite", atomic: true, create: proofSQLiteFile, open: func(t *testing.T, loc string) *proofEnv {
		s := proofOpenSQLite(t, loc)
		return proofAtomicEnv(t, proofMust(idemsql.SQLDB(context.Background(), s.DB()))(t), s)
	}},
	{name: "atomic-postgres-pgx", atomic: true, create: proofPgSchema, open: func(t *testing.T, loc string) *proofEnv {
		pool := proofOpenPool(t, loc)
		return proofAtomicEnv(t, idempg.TxDB(pool), proofMust(idempg.New(context.Background(), pool, idempg.Config{}))(t))
	}},
	{name: "atomic-postgres-sql", atomic: true, create: proofPgSchema, open: func(t *testing.T, loc string) *proofEnv {
		db := proofOpenPgSQL(t, loc)
		return proofAtomicEnv(t, proofMust(idemsql.SQLDB(context.Background(), db))(t), proofMust(idempg.NewSQL(context.Background(), db, idempg.Config{}))(t))
	}},
	{name: "atomic-mysql", atomic: true, create: testsvc.MySQLDatabase, open: func(t *testing.T, loc string) *proofEnv {
		s := proofOpenMySQL(t, loc)
		return proofAtomicEnv(t, idemmysql.TxDB(s.DB()), s)
	}},
}

func proofSQLiteFile(t testing.TB) string { return filepath.Join(t.TempDir(), "idem.db") }

func proofPgSchema(t testing.TB) string {
	cs, _ := testsvc.PostgresSchema(t)
	return cs
}

func proofOpenSQLite(t *testing.T, path string) *idemsqlite.Store {
	s := proofMust(idemsqlite.Open(context.Background(), path, idemsqlite.Config{}))(t)
	t.Cleanup(func() { s.Close() })
	return s
}

func proofOpenPool(t *testing.T, cs string) *pgxpool.Pool {
	pool := proofMust(pgxpool.New(context.Background(), cs))(t)
	t.Cleanup(pool.Close)
	return pool
}

func proofOpenPgSQL(t *testing.T, cs string) *sql.DB {
	db := proofMust(sql.Open("pgx", cs))(t)
	t.Cleanup(func() { db.Close() })
	return db
}

func proofOpenMySQL(t *testing.T, rawURL string) *idemmysql.Store {
	s := proofMust(idemmysql.Open(context.Background(), rawURL, idemmysql.Config{}))(t)
	t.Cleanup(func() { s.Close() })
	return s
}

// proofEnv is an opened target: how to build its server interceptor, the
// effect its handler has, and how to count that effect.
type proofEnv struct {
	// store is the Store of the plain interceptor; nil in atomic mode.
	store idem.Store
	// interceptor returns the server interceptor of cfg; in plain mode cfg.Store
	// defaults to store.
	interceptor func(cfg idemgrpc.Config) (grpc.UnaryServerInterceptor, error)
	// effect is the Orders.Effect of the target: nil in plain mode, where the
	// Orders' own record is the effect; in atomic mode the insert of the order row
	// through the call's transaction.
	effect func(ctx context.Context, req *orderspb.PlaceOrderRequest, order *orderspb.Order) error
	// placed returns the ids of the orders placed for customer: the Orders' record
	// in plain mode, the committed rows in atomic mode.
	placed func(t *testing.T, orders *grpctest.Orders, customer string) []string
}

func proofPlainEnv(store idem.Store) *proofEnv {
	return &proofEnv{
		store: store,
		interceptor: func(cfg idemgrpc.Config) (grpc.UnaryServerInterceptor, error) {
			if cfg.Store == nil {
				cfg.Store = store
			}
			return idemgrpc.UnaryServerInterceptor(cfg)
		},
		placed: func(_ *testing.T, orders *grpctest.Orders, customer string) []string {
			return orders.OrdersOf(customer)
		},
	}
}

// proofAtomicEnv is the atomic interceptor on db and store, with the table
// proof_orders(customer, order_id) that its handler writes.
func proofAtomicEnv[Tx any](t *testing.T, db idemsql.TxDB[Tx], store idem.TxStore[Tx]) *proofEnv {
	ctx := context.Background()
	if err := db.InTx(ctx, func(tx Tx) error {
		_, err := db.Querier(tx).Exec(ctx, "CREATE TABLE IF NOT EXISTS proof_orders (customer VARCHAR(200) NOT NULL, order_id VARCHAR(64) NOT NULL)")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return &proofEnv{
		interceptor: func(cfg idemgrpc.Config) (grpc.UnaryServerInterceptor, error) {
			return idemgrpc.AtomicUnaryServerInterceptor(db, store, cfg)
		},
		effect: func(ctx context.Context, req *orderspb.PlaceOrderRequest, order *orderspb.Order) error {
			tx, ok := idemgrpc.TxFrom[Tx](ctx)
			if !ok {
				return status.Error(codes.Internal, "no transaction in the handler's context")
			}
			_, err := db.Querier(tx).Exec(ctx, "INSERT INTO proof_orders (customer, order_id) VALUES ($1, $2)", req.GetCustomer(), order.GetOrderId())
			return err
		},
		placed: func(t *testing.T, _ *grpctest.Orders, customer string) []string {
			t.Helper()
			var ids []string
			if err := db.InTx(ctx, func(tx Tx) error {
				rows, err := db.Querier(tx).Query(ctx, "SELECT order_id FROM proof_orders WHERE customer = $1 ORDER BY order_id", customer)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var id string
					if err := rows.Scan(&id); err != nil {
						return err
					}
					ids = append(ids, id)
				}
				return rows.Err()
			}); err != nil {
				t.Fatal(err)
			}
			return ids
		},
	}
}

// proofModes picks the targets of a scenario by interceptor mode.
type proofModes int

const (
	proofBoth       proofModes = iota // every target
	proofPlainOnly                    // UnaryServerInterceptor
	proofAtomicOnly                   // AtomicUnaryServerInterceptor
)

// proofForEach runs fn as a parallel subtest per target of modes, each on a
// fresh store.
func proofForEach(t *testing.T, modes proofModes, fn func(t *testing.T, tg proofTarget, loc string, env *proofEnv)) {
	for _, tg := range proofTargets {
		if modes == proofPlainOnly && tg.atomic || modes == proofAtomicOnly && !tg.atomic {
			continue
		}
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			loc := tg.create(t)
			fn(t, tg, loc, tg.open(t, loc))
		})
	}
}

// serve starts a loopback server of orders behind outer (outermost first) and
// env's interceptor of cfg, with orders' effect set to env's, and returns its
// address.
func (env *proofEnv) serve(t *testing.T, cfg idemgrpc.Config, orders *grpctest.Orders, outer ...grpc.UnaryServerInterceptor) string {
	t.Helper()
	mw := proofMust(env.interceptor(cfg))(t)
	orders.Effect = env.effect
	return grpctest.Serve(t, grpc.NewServer(grpc.ChainUnaryInterceptor(append(outer, mw)...)), orders)
}

// proofDial connects a client of the order service to addr, with serviceConfig and
// the client interceptors (outermost first), closed when t ends.
func proofDial(t *testing.T, addr, serviceConfig string, interceptors ...grpc.UnaryClientInterceptor) orderspb.OrdersClient {
	t.Helper()
	conn := proofMust(grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(interceptors...), grpc.WithDefaultServiceConfig(serviceConfig)))(t)
	t.Cleanup(func() { conn.Close() })
	return orderspb.NewOrdersClient(conn)
}

// proofCall is the context of one call through a proxy that cuts: bounded, so
// that a proxy that never came back fails the test with the call's error
// instead of hanging the package until its timeout.
func proofCall(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// proofKeys is the client interceptor with the default ClientConfig.
func proofKeys(t *testing.T) grpc.UnaryClientInterceptor {
	return proofMust(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{}))(t)
}

// proofPlacedOnce fails t unless customer's call took effect exactly once, as the
// order o answered.
func proofPlacedOnce(t *testing.T, env *proofEnv, orders *grpctest.Orders, customer string, o *orderspb.Order) {
	t.Helper()
	ids := env.placed(t, orders, customer)
	if len(ids) != 1 {
		t.Fatalf("%s: %d orders placed (%v), want 1", customer, len(ids), ids)
	}
	if o.GetOrderId() != ids[0] || o.GetCustomer() != customer {
		t.Fatalf("%s: answered order %s of %q, but the order placed is %s", customer, o.GetOrderId(), o.GetCustomer(), ids[0])
	}
}

// proofMust(f())(t) is f's value, or the test fails with f's error.
func proofMust[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
