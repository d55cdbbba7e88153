package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/cmd/idem/internal/relay"
	"github.com/idemhq/idem/internal/redact"
	"github.com/idemhq/idem/outbox"
)

// defaultRelayListen serves /metrics and /healthz on loopback only, as idem serve
// does its admin port: exposing them is a choice (--listen :9464).
const defaultRelayListen = "127.0.0.1:9464"

// relayOptions are the flags of idem relay.
type relayOptions struct {
	db, sink, listen   string
	batch, maxAttempts int
	roundBatches       int
	poll, retention    time.Duration
	stallAfter         time.Duration
	adminToken         string
	schema             bool
	cdc                cdcOptions // --cdc: relay_cdc.go
	open.SinkFlags
}

const relaySynopsis = `Publishes the transactional outbox (the table idem_outbox, written by
outbox.EnqueueTx or by any service that follows the contract printed by --schema)
to a broker or a webhook, and marks what it published. Every message carries its
ID as the broker's dedup id or the webhook's Idempotency-Key, so the copies that a
crash or a retry produces are dropped downstream.

Databases (--db):
  postgres://user:pass@host:5432/db    several relays may share it; woken by LISTEN/NOTIFY
  mysql://user:pass@host:3306/db       MySQL 8.0 or MariaDB 10.6+; several relays may share
                                       it; polled every --poll (no notifications)
  sqlite:PATH                          an existing file; run one relay per file

Sinks (--sink):
  nats://host:4222 (tls://host:4222)   JetStream. The topics must belong to a stream:
                                       create it, or pass --nats-stream and --nats-subjects
  kafka://host:9092[,host:9092]        Kafka (idempotent producer, acks=all)
  redis://host:6379[/db]               Redis Streams, one stream per topic
  amqp://user:pass@host:5672/[vhost]   RabbitMQ, default exchange unless --amqp-exchange
  pubsub://PROJECT                     Google Pub/Sub: topic = the row's topic (it must exist),
                                       ID in the Idem-Msg-Id attribute; credentials from
                                       $GOOGLE_APPLICATION_CREDENTIALS, or the emulator at
                                       $PUBSUB_EMULATOR_HOST
  sqs://?region=eu-west-1              Amazon SQS FIFO; topics name the queues (orders.fifo)
                                       or are their URLs; credentials from the AWS chain
                                       (AWS_* variables, profile, role). sqs://host:port for
                                       a local SQS-compatible endpoint over HTTP
  https://host/path                    webhook (Standard Webhooks), signed with $IDEM_WEBHOOK_SECRET

HTTP (--listen, loopback only by default): /metrics for Prometheus and /healthz,
503 when neither a database ping nor a publication succeeded within 3 poll
intervals, or when messages have waited --stall-after with none published (by
this relay or another of the outbox), whatever the cause; 200 otherwise. /healthz
gives a status and a short reason ("sink: webhook returned 500"); the details are
in the log, with credentials masked, and a failure that repeats is logged a few
times, not at every attempt. The relay checks its sink before it starts: a broker
or a webhook that does not answer is an error at start, as a database is.
SIGINT or SIGTERM stops the relay; unfinished publications are redone by the next.

Log-based (--cdc, PostgreSQL with wal_level=logical): reads the outbox's inserts
from the WAL through a replication slot (--slot) instead of querying the table, and
confirms a position to the server only after the broker stored everything before
it. Each message carries idem-source, idem-lsn and idem-lsn-index headers for
consumers that deduplicate by position. Relays on one slot take turns by a lock.
A message it cannot publish is parked in the outbox table with its reason (idem
outbox parked; --admin-token serves it at /api/) and the slot moves on; /healthz
answers 503 when messages wait with none published for --stall-after. WAL messages
(pgcdc.EmitTx) are published only with --cdc-messages, which needs EXECUTE on
pg_logical_emit_message revoked from PUBLIC. --drop-slot drops the slot (and the
WAL it holds) and exits. /metrics adds idem_cdc_lag_bytes, idem_cdc_lag_seconds,
idem_cdc_retained_wal_bytes and idem_cdc_parked_total.
Traces go over OTLP when $OTEL_EXPORTER_OTLP_ENDPOINT (and the other standard OTEL_*
variables) is set; log lines under a span carry its trace_id and span_id.`

func (m *Main) runRelay(ctx context.Context, args []string) error {
	fs := m.newFlagSet("relay", relaySynopsis)
	o := &relayOptions{}
	fs.StringVar(&o.db, "db", "", "the outbox's database: postgres://…, mysql://… or sqlite:PATH  [$IDEM_DB]")
	fs.StringVar(&o.sink, "sink", "", "where to publish: nats://, kafka://, redis://, amqp://, pubsub://, sqs:// or https:// (webhook)  [$IDEM_SINK]")
	fs.StringVar(&o.listen, "listen", defaultRelayListen, "address of /metrics and /healthz (:9464 for every interface); empty for none")
	fs.IntVar(&o.batch, "batch", 100, "messages published per round, 1 to 10000")
	fs.IntVar(&o.roundBatches, "round-batches", 8, "PostgreSQL: batches one round publishes back to back, each while the last is marked, 1 to 1000 (1: one batch a round)")
	fs.DurationVar(&o.poll, "poll", time.Second, "how often to look for messages without a wake-up")
	fs.IntVar(&o.maxAttempts, "max-attempts", 10, "failed publications after which a message is parked (a row that cannot be decoded counts as one)")
	fs.DurationVar(&o.stallAfter, "stall-after", time.Minute, "/healthz turns 503 when messages have waited this long with none published "+
		"(polling: at least 3 --poll intervals; --cdc: also when the relay could not stream the slot this long)")
	fs.DurationVar(&o.retention, "retention", 7*24*time.Hour, "how long published messages stay in the table")
	fs.StringVar(&o.NATSStream, "nats-stream", "", "create or update this JetStream stream at start (with --nats-subjects)")
	fs.StringVar(&o.NATSSubjects, "nats-subjects", "", "comma-separated subjects of --nats-stream, such as 'orders.>' (default: the stream's name)")
	fs.StringVar(&o.AMQPExchange, "amqp-exchange", "", "RabbitMQ exchange to publish to, with the topic as routing key (default: the default exchange)")
	fs.DurationVar(&o.RedisDedup, "redis-dedup", open.DefaultRedisDedup, "Redis sinks: drop a message whose id was appended to its stream this recently "+
		"(a restarted relay's copies of its last round; one marker key per message lives this long); 0 appends every publish")
	fs.BoolVar(&o.AMQPMandatory, "amqp-mandatory", true, "fail (and retry, then park) messages no RabbitMQ queue is bound to, instead of losing them")
	fs.StringVar(&o.WebhookSecret, "webhook-secret", "", "HMAC secret of webhook signatures (Standard Webhooks): whsec_<base64 of 24+ random bytes>, or 32+ random bytes (openssl rand -hex 32); prefer the environment  [$IDEM_WEBHOOK_SECRET]")
	fs.DurationVar(&o.WebhookTimeout, "webhook-timeout", 10*time.Second, "time limit of one webhook request")
	fs.StringVar(&o.adminToken, "admin-token", "", "serve the admin API (the outbox) at /api/ of --listen with this bearer token, 16+ random bytes; prefer the environment  [$IDEM_ADMIN_TOKEN]")
	fs.BoolVar(&o.schema, "schema", false, "print the outbox table and the insert contract for services in other languages, and exit")
	o.cdc.flags(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	// The environment is read after parsing so that --help never prints a secret.
	o.db = cmp.Or(o.db, os.Getenv("IDEM_DB"))
	o.sink = cmp.Or(o.sink, os.Getenv("IDEM_SINK"))
	o.WebhookSecret = cmp.Or(o.WebhookSecret, os.Getenv("IDEM_WEBHOOK_SECRET"))
	o.adminToken = cmp.Or(o.adminToken, os.Getenv("IDEM_ADMIN_TOKEN"))
	if o.schema {
		printSchema(m.Stdout, open.DialectOf(o.db))
		return nil
	}
	if o.cdc.on || o.cdc.dropSlot {
		return m.runRelayCDC(ctx, fs, o)
	}
	db, sink, err := o.check()
	if err == nil {
		err = checkAdminToken(o.adminToken, "--listen", o.listen)
	}
	if err != nil {
		return cli.UsageErr(fs, "%s", redact.String(err.Error()))
	}
	return m.relay(ctx, o, db, sink)
}

// check validates the flags before anything connects; its errors name the flag.
func (o *relayOptions) check() (open.DBSpec, open.SinkSpec, error) {
	switch {
	case o.db == "":
		return open.DBSpec{}, open.SinkSpec{}, errors.New("--db is required: pass postgres://user@host:5432/db, mysql://user@host:3306/db or sqlite:PATH (or set $IDEM_DB)")
	case o.sink == "":
		return open.DBSpec{}, open.SinkSpec{}, errors.New("--sink is required: pass nats://host:4222, kafka://host:9092, redis://host:6379, amqp://… or https://… (or set $IDEM_SINK)")
	case o.batch < 1 || o.batch > 10_000:
		return open.DBSpec{}, open.SinkSpec{}, fmt.Errorf("--batch must be 1 to 10000 (got %d)", o.batch)
	case o.roundBatches < 1 || o.roundBatches > 1000:
		return open.DBSpec{}, open.SinkSpec{}, fmt.Errorf("--round-batches must be 1 to 1000 (got %d)", o.roundBatches)
	case o.poll <= 0:
		return open.DBSpec{}, open.SinkSpec{}, fmt.Errorf("--poll must be positive, such as 1s (got %v)", o.poll)
	case o.maxAttempts < 1:
		return open.DBSpec{}, open.SinkSpec{}, fmt.Errorf("--max-attempts must be at least 1 (got %d)", o.maxAttempts)
	case o.retention <= 0:
		return open.DBSpec{}, open.SinkSpec{}, fmt.Errorf("--retention must be positive, such as 168h (got %v)", o.retention)
	case o.WebhookTimeout <= 0:
		return open.DBSpec{}, open.SinkSpec{}, fmt.Errorf("--webhook-timeout must be positive, such as 10s (got %v)", o.WebhookTimeout)
	}
	db, err := open.ParseDB(o.db)
	if err != nil {
		return db, open.SinkSpec{}, err
	}
	sink, err := open.ParseSink(o.sink, &o.SinkFlags)
	if err == nil && o.stallAfter <= 0 {
		err = fmt.Errorf("--stall-after must be positive, such as 1m (got %v)", o.stallAfter)
	}
	return db, sink, err
}

// relay runs the relay until ctx ends, then stops it, the HTTP server and the
// connections, in that order.
// relayConfig is the outbox relay's configuration from the flags.
func (o *relayOptions) relayConfig() outbox.RelayConfig {
	return outbox.RelayConfig{BatchSize: o.batch, RoundBatches: o.roundBatches, PollInterval: o.poll,
		MaxAttempts: o.maxAttempts, Retention: o.retention}
}

func (m *Main) relay(ctx context.Context, o *relayOptions, db open.DBSpec, ss open.SinkSpec) error {
	log, reg, stopTracing, err := cli.StartDaemon(ctx, m.Stderr, "relay")
	if err != nil {
		return err
	}
	defer stopTracing()
	cfg := o.relayConfig()
	cfg.Registerer, cfg.Logger = reg, log

	tracked, h, closeSink, err := o.openSink(ctx, ss, log)
	if err != nil {
		return err
	}
	defer closeSink()
	h.StallAfter = max(o.stallAfter, 3*o.poll)

	rd, err := open.Relay(ctx, db, tracked, cfg)
	if err != nil {
		return err
	}
	defer rd.Close()
	handler := relay.Handler(reg, h)
	if o.adminToken != "" {
		if handler, err = relayAdminAPI(o.adminToken, rd.Outbox, reg, log, handler); err != nil {
			return err
		}
	}
	return relay.Serve(ctx, o.serving(m.Stderr), h, handler, rd.Run, h.WatchStall(rd.Stall), fmt.Sprintf("%s → %s", db.Desc, ss.Desc))
}

// serving is how relay.Serve runs the relay of these flags.
func (o *relayOptions) serving(stderr io.Writer) relay.Serving {
	return relay.Serving{Listen: o.listen, API: o.adminToken != "", Batch: o.batch, Poll: o.poll, Stderr: stderr}
}

// openSink connects the sink of ss, whose publications feed the health it returns.
func (o *relayOptions) openSink(ctx context.Context, ss open.SinkSpec, log *slog.Logger) (idem.Sink, *relay.Health, func(), error) {
	sink, closeSink, err := ss.Open(ctx, &o.SinkFlags)
	if err != nil {
		return nil, nil, nil, err
	}
	h := relay.NewHealth(3*o.poll, log)
	return h.Track(sink), h, closeSink, nil
}
