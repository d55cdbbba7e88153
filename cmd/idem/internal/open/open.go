// Package open turns the URL flags of idem's commands into connected backends:
// one switch per kind of backend, to one small opener per URL scheme. The openers
// of a scheme live in its own file (postgres.go, mysql.go, sqlite.go, redis.go,
// rediscluster.go, nats.go, natscluster.go, kafka.go, amqp.go, pubsub.go, sqs.go)
// with the connection helper serve, relay, verify, bench and the operator commands
// share. A command's check parses its flag without connecting (ParseStore,
// ParseDB, ParseSink); the openers connect, and their errors name the flag.
//
//	serve  --store   sqlite:PATH, postgres://, mysql://, redis://, redis-cluster://, memory:  StoreSpec.Open
//	relay  --db      sqlite:PATH, postgres://, mysql://              Relay
//	admin  --db      sqlite:PATH, postgres://, mysql:// (no DDL)  AdminDB
//	audit  --db, --consumer …@URL  sqlite:PATH, postgres://, mysql:// (no DDL)  Auditor, AuditRepairs
//	relay  --sink    nats://, kafka://, redis://, amqp://, pubsub://, sqs://, https://  SinkSpec.Open
//	verify --db      sqlite:[PATH], postgres://, mysql://            VerifyDatabase
//	verify --broker  nats:[//…], kafka:[//…], redis://, amqp://, pubsub:[//…], sqs:  VerifyBroker
//	bench            the same SQLite DSN (SQLite)
package open

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/redact"
	"github.com/idemhq/idem/outbox"
)

// Open connects the store and registers its metrics on reg; close releases what
// it acquired, after the last request that used the store.
func (s StoreSpec) Open(ctx context.Context, reg prometheus.Registerer) (store idem.Store, close func(), err error) {
	switch s.Kind {
	case "memory":
		return openMemoryStore(s, reg)
	case "sqlite":
		return openSQLiteStore(ctx, s, reg)
	case "postgres":
		return openPostgresStore(ctx, s, reg)
	case "redis":
		return openRedisStore(ctx, s, reg)
	case "redis-cluster":
		return openRedisClusterStore(ctx, s, reg)
	case "mysql":
		return openMySQLStore(ctx, s, reg)
	}
	return nil, nil, fmt.Errorf("--store %s: unknown store kind %q", s.Desc, s.Kind)
}

// openMemoryStore is serve's --store memory:[?max_bytes=N].
func openMemoryStore(s StoreSpec, reg prometheus.Registerer) (idem.Store, func(), error) {
	st, err := idemmem.New(idemmem.Config{Registerer: reg, MaxBytes: s.maxBytes, KeepKeys: s.KeepKeys})
	return st, func() {}, err
}

// RelayDB is the outbox relay on relay's --db: run publishes until its context
// ends, stall measures how long messages have waited unpublished (a query that
// also shows the database answers), close releases the connections.
type RelayDB struct {
	Run    func(context.Context) error
	Stall  func(context.Context) (time.Duration, error)
	Close  func()
	Outbox admin.Outbox // the admin API's outbox area on the same database
}

// Relay opens the outbox of --db and its relay publishing to sink.
func Relay(ctx context.Context, db DBSpec, sink idem.Sink, cfg outbox.RelayConfig) (*RelayDB, error) {
	switch db.Dialect {
	case "postgres":
		return openPostgresRelay(ctx, db, sink, cfg)
	case "mysql":
		return openMySQLRelay(ctx, db, sink, cfg)
	case "sqlite":
		return openSQLiteRelay(ctx, db, sink, cfg)
	}
	return nil, fmt.Errorf("--db %s: unknown database", db.Desc)
}

// withRelay sets rd.Run to the relay of ob to sink, or closes rd.
func withRelay[Tx any](rd *RelayDB, ob *outbox.Outbox[Tx], db idemsql.TxDB[Tx], sink idem.Sink, cfg outbox.RelayConfig) (*RelayDB, error) {
	r, err := ob.Relay(sink, cfg)
	if err != nil {
		rd.Close()
		return nil, err
	}
	rd.Run, rd.Stall, rd.Outbox = r.Run, r.Stall, OutboxArea(db)
	return rd, nil
}

// Open connects the sink and checks that it answers (sinkDown); close releases
// what open acquired.
func (s SinkSpec) Open(ctx context.Context, o *SinkFlags) (sink idem.Sink, close func(), err error) {
	switch s.Kind {
	case "nats":
		return openNATSSink(ctx, s, o)
	case "kafka":
		return openKafkaSink(ctx, s)
	case "redis":
		return openRedisSink(ctx, s, o)
	case "amqp":
		return openAMQPSink(s, o)
	case "pubsub":
		return openPubSubSink(ctx, s)
	case "sqs":
		return openSQSSink(ctx, s)
	case "webhook":
		if err := probeWebhook(ctx, s); err != nil {
			return nil, nil, sinkDown(s, err)
		}
		return s.webhook, func() {}, nil
	}
	return nil, nil, fmt.Errorf("--sink %s: unknown sink", s.Desc)
}

// VerifyDatabase maps verify's --db to a database the run owns:
//
//	sqlite:        a SQLite file in a temporary directory, removed after
//	sqlite:PATH    a new SQLite file at PATH, kept (it must not exist)
//	postgres://…   PostgreSQL, through a chaos.Proxy; the run's tables go into a
//	               fresh schema, dropped after unless keep
//	mysql://…      MySQL or MariaDB, through a chaos.Proxy; the run's tables go
//	               into a fresh database, dropped after unless keep
func VerifyDatabase(ctx context.Context, raw string, keep bool) (*Database, error) {
	if err := cli.CheckURL("--db", raw); err != nil {
		return nil, err
	}
	switch {
	case strings.HasPrefix(raw, "sqlite:"):
		return openVerifySQLite(ctx, raw, keep)
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return openVerifyPostgres(ctx, raw, keep)
	case strings.HasPrefix(raw, "mysql://"):
		return openVerifyMySQL(ctx, raw, keep)
	}
	return nil, fmt.Errorf("--db %q: unknown database; use sqlite: (temporary), sqlite:PATH, postgres://user@host/db or mysql://user@host:3306/db", redact.URL(raw))
}

// VerifyBroker maps verify's --broker to a broker for the run:
//
//	nats:                 embedded NATS JetStream in a temporary directory (default)
//	nats://host:4222      a NATS server with JetStream
//	nats-cluster:         three embedded NATS nodes, an R3 stream; nodes killed, routes cut
//	kafka:                an in-process Kafka cluster (franz-go's kfake)
//	kafka://host:9092     a Kafka cluster
//	redis://host:6379     Redis Streams
//	amqp://user:pass@host RabbitMQ (a quorum queue)
//	pubsub:               an in-process Pub/Sub fake (pstest)
//	pubsub://PROJECT      Google Pub/Sub (or the emulator at $PUBSUB_EMULATOR_HOST)
//	sqs:                  an in-process SQS with a FIFO queue (idemsqs/sqsfake)
//	db:                   no broker: the database as the queue (package queue,
//	                      idem_queue in the run's database; verify.DBQueue)
//
// Every run uses its own stream, topic or queue, named after run. Connections to
// NATS, Redis and RabbitMQ go through a chaos.Proxy, so the run can cut them.
func VerifyBroker(ctx context.Context, raw, run string, logger *slog.Logger) (*Broker, error) {
	if err := cli.CheckURL("--broker", raw); err != nil {
		return nil, err
	}
	b := &Broker{}
	var err error
	switch scheme, _, _ := strings.Cut(raw, ":"); scheme {
	case "nats":
		err = openNATSBroker(ctx, b, raw, run, logger)
	case "nats-cluster":
		err = openNATSClusterBroker(ctx, b, raw, run, logger)
	case "kafka":
		err = openKafkaBroker(b, raw, run)
	case "redis", "rediss":
		err = openRedisBroker(ctx, b, raw, run)
	case "amqp", "amqps":
		err = openAMQPBroker(ctx, b, raw, run)
	case "pubsub":
		err = openPubSubBroker(ctx, b, raw, run, logger)
	case "sqs":
		err = openSQSBroker(ctx, b, raw, run)
	case "db":
		err = openDBQueueBroker(b, raw, run)
	default:
		err = fmt.Errorf("--broker %q: unknown broker; use nats: (embedded), nats-cluster: (3 embedded nodes), nats://host:4222, kafka: (in-process), "+
			"kafka://host:9092, redis://host:6379 (Streams), amqp://user:pass@host:5672/, pubsub: (in-process), pubsub://PROJECT, sqs: (in-process) or db: (the database as the queue)", redact.URL(raw))
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}
