package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/cmd/idem/internal/verify"
)

// verifyOptions are the flags of idem verify.
type verifyOptions struct {
	ops, clients, consumers       int
	rate                          float64
	seed                          int64
	db, broker, relay, cpuProfile string
	api, pay                      string
	unsafe, asJSON, keep, verbose bool
	timeout                       time.Duration
	brokerLoss                    float64
	repair                        bool
	auditGrace                    time.Duration
	auditGraceSet                 bool // --audit-grace given: else the Flow's default, which follows the broker
	dbCrash                       int
	failover                      string
	skew                          time.Duration
}

const verifySynopsis = `Runs a whole exactly-once flow under injected faults and checks, from the
databases themselves, that every order took effect exactly once:

  clients --HTTP, Idempotency-Key--> order service --one tx--> order + outbox
  --relay--> broker --> consumers --one tx with the message key--> ledger + balance

Every boundary uses idem's own packages (idemhttp, outbox, inbox and a broker
adapter). Faults: responses dropped after the server executed, duplicate and
concurrent requests, the relay killed between publish and mark, failed
publishes, duplicate deliveries, lost acks, consumers killed before the effect,
before the commit and before the ack (and restarted), a consumer paused past its
ack wait while its message is redelivered, database and broker connections cut
through a TCP proxy (Postgres, MySQL, NATS, Redis, RabbitMQ), and jumps of the
clock that drives key expiry (SQLite), requests that reach the service after
their Idem-Deadline while their client places the order again, and, at the end,
a few retries after the retention window. The keys are UUIDv7s: idem refuses
those late requests (410, 412) instead of applying them, and counts them as
refused; --unsafe applies them (late applied).

--broker-loss F makes the broker acknowledge a fraction F of the messages and
lose them (broker_acked_lost), as JetStream loses unsynced writes on power
failure: the outbox marks them published and no consumer gets them. The run's
audit (package audit, every second over the run's database, as an operator
would run it) finds them missing after its grace (--audit-grace) and, with
--repair (the default), republishes them under their ids: nothing is lost.
With --repair=false the audit only reads, the run settles once all that is
left is what the audit finds missing, and it must fail with exactly those
messages lost. The report ends with the audit's section: its figures, its
repairs and its sentence.

--broker db: runs the flow with the database as the queue (package queue): the
order service enqueues each event into idem_queue in the order's transaction,
no relay runs, and the consumers claim from that table with a 2 s lease and
retire each message in its effect's transaction. Its rows are "order → queue
(one tx)" and "queue (database) → consumer", with the queue's claims,
redeliveries and lease takeovers in a note. Consumers are killed before the
effect, before and after the commit, and paused (renewals too) until another
took their message over, whose retirement then fails and rolls the effect
back. There is no ack to lose and no broker to lose messages (--broker-loss is
refused), and no outbox to audit.

--failover sync|async runs on a private PostgreSQL cluster (a primary and two
streaming-replication standbys on loopback, in a temporary directory), with
synchronous (synchronous_standby_names = 'ANY 1 (s1, s2)') or asynchronous
replication. Every component reaches it by one multi-host URL with
target_session_attrs=read-write. Once half the orders are answered the primary
is killed (SIGKILL), the standby with the most WAL is promoted and the other
re-pointed at it; the components reconnect on their own. The section "primary
failover" says how long it took, what idem saw, and how many acknowledged
orders were absent afterwards: with sync none may be; with async some may be,
lost by the database (the run then fails, and says so). It needs no --db.

--skew D gives the run's nodes clocks that disagree by D: two HTTP gateways
(two idemhttp middleware instances on the one store, each order's requests sent
to them in turn), the consumer processes, the payment workers (an effect fence
each) and, with --broker db:, the queue consumers (a queue each) read clocks
off the run's by +D/2 and -D/2 in turn. The leases read on those clocks (the
fence's, the queue's) are made at least 2×D, which a skew of D tolerates (a
live holder renews every third of its lease). The report's "clock skew" section
lists each node's offset, which clock each part trusts (the key stores on
PostgreSQL, MySQL and Redis the server's; SQLite, the fence, the queue and the
stale-key checks the caller's) and the takeovers; nothing may be lost or
doubled. At most 10m.

--api grpc places the orders over gRPC instead (idemgrpc's interceptors,
grpc-go's retry policy), with the same faults in their gRPC form: responses
answered UNAVAILABLE after the service ran, calls sent twice at once, calls held
in the server past their deadline (refused DEADLINE_EXCEEDED), late retries
refused FAILED_PRECONDITION; its row is "client → gRPC API".

--pay keyed has the payment workers charge through effect.Fence.DoKeyed (no
PENDING record and no lease: the run's payment service deduplicates by the
Idempotency-Key, as the keyed path requires), and --pay keyed-write-behind
through DoKeyed with its record written after it returns
(effect.Config.KeyedWriteBehind). The same faults apply: a worker killed after
the charge leaves no record, and its retry is answered by the service; a
stalled worker's order may be charged by the other at once, and the service
answers the second call 409 until the first has finished.

--db-crash N kills the database server with SIGKILL N times while the clients
place orders (after ops*i/(N+1) orders were acknowledged) and restarts it at
once on its data: the server replays its log, and the order service, relay,
consumers, payments and audit must carry on without a restart of their own. It
needs a server the run owns: --db postgres: (a private PostgreSQL) or --db
mysql: (a private MariaDB), each started in a temporary directory. The report
ends with a "database crash" section: the kills, how long each outage lasted
(measured), the warnings the components logged and the orders acknowledged
and applied after each restart; the run fails if a kill did not happen or the
flow did not resume.

The table has one row per boundary (below: what each checks, what each column
counts, and the faults by the names the table gives them). Exit status 0 only
if nothing was lost, no effect was doubled and no late request was applied. With --unsafe the same flow runs
without idem's protection (no idempotency middleware, no inbox dedup): it must
report duplicated effects and exit 1, which proves the checker can fail.

The header line is printed first; while the flow runs, a progress line on
stderr (rewritten in place on a terminal; elsewhere a plain line every 10 s)
counts the orders placed, applied to the ledger and paid, and the faults so far.

--seed fixes the orders and which operation each fault hits (the n-th attempt
of a request or delivery); goroutine scheduling still varies between runs.`

func (m *Main) runVerify(ctx context.Context, args []string) error {
	fs, o := m.verifyFlags()
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { o.auditGraceSet = o.auditGraceSet || f.Name == "audit-grace" })
	if err := o.check(); err != nil {
		return cli.UsageErr(fs, "%v", err)
	}
	if o.seed == 0 {
		o.seed = time.Now().UnixNano() % 1_000_000_000
	}
	return m.verify(ctx, o)
}

// verifyFlags returns the flag set of idem verify and the options it fills.
func (m *Main) verifyFlags() (*flag.FlagSet, *verifyOptions) {
	var legend strings.Builder
	_ = verify.WriteLegend(&legend)
	fs := m.newFlagSet("verify", verifySynopsis+"\n\n"+strings.TrimSuffix(legend.String(), "\n"))
	o := &verifyOptions{}
	fs.IntVar(&o.ops, "ops", 10000, "orders to place")
	fs.IntVar(&o.clients, "clients", 16, "concurrent clients of the order API (HTTP or gRPC)")
	fs.IntVar(&o.consumers, "consumers", 2, "concurrent consumer processes")
	fs.Float64Var(&o.rate, "fault-rate", 0.25, "fraction of operations (requests, publishes, deliveries) hit by a fault, 0 to 1")
	fs.Int64Var(&o.seed, "seed", 0, "seed for orders and faults (0: pick one and print it)")
	fs.StringVar(&o.db, "db", cli.EnvOr("IDEM_DB", "sqlite:"), "database: sqlite: (temporary file), sqlite:PATH (new file), postgres://user@host/db (a fresh schema), mysql://user@host:3306/db (a fresh database), postgres: (a private PostgreSQL in a temporary directory) or mysql: (a private MariaDB in a temporary directory)  [$IDEM_DB]")
	fs.StringVar(&o.broker, "broker", cli.EnvOr("IDEM_BROKER", "nats:"), "broker: nats: (embedded), nats-cluster: (3 embedded nodes, killed and cut), nats://host:4222, kafka: (in-process kfake), kafka://host:9092, redis://host:6379 (Streams), amqp://user:pass@host:5672/, pubsub: (in-process pstest), pubsub://PROJECT, sqs: (in-process SQS FIFO) or db: (no broker: the database as the queue, package queue)  [$IDEM_BROKER]")
	fs.BoolVar(&o.unsafe, "unsafe", false, "turn idem's protection off (plain at-least-once): the negative control, expected to fail")
	fs.BoolVar(&o.asJSON, "json", false, "write the report as JSON instead of a table")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to wait for the flow to settle after the last order; what has not arrived by then is counted lost, and the report says the run did not settle")
	fs.BoolVar(&o.keep, "keep", false, "keep the run's database (temporary SQLite file, Postgres schema or MySQL database) for inspection")
	fs.StringVar(&o.api, "api", verify.APIHTTP, "the order API the clients call: http (POST /orders with Idempotency-Key, idemhttp) or grpc (Orders.PlaceOrder with idempotency-key metadata, idemgrpc, grpc-go's retry policy); the first row is then \"client → gRPC API\"")
	fs.StringVar(&o.pay, "pay", verify.PayFence, "how the payment workers go through their effect fences: fence (Fence.Do: PENDING, call, COMPLETE, under a lease), keyed (Fence.DoKeyed: the run's payment service deduplicates by the key, so no PENDING and no lease) or keyed-write-behind (DoKeyed with its record written after it returns)")
	fs.StringVar(&o.relay, "relay", "outbox", "the outbox relay: outbox (polls the table, woken by NOTIFY) or cdc (reads PostgreSQL's WAL; without --db it starts a private PostgreSQL in a temporary directory)")
	fs.Float64Var(&o.brokerLoss, "broker-loss", 0, "fraction of messages the broker acknowledges and then loses (broker_acked_lost), 0 to 1: found missing by the audit and, with --repair, republished")
	fs.BoolVar(&o.repair, "repair", true, "let the run's audit republish the messages it finds missing (under their ids); --repair=false: the audit only reads, and a lost message stays lost")
	fs.DurationVar(&o.auditGrace, "audit-grace", 0, "the audit's grace: a message published longer ago and not applied is missing (and republished with --repair); above the consumers' lag, or messages merely behind are republished needlessly (the inbox drops the copies); unset: 10s plus the broker's redelivery wait (20s more on Pub/Sub, whose leases last at least 10s)")
	fs.IntVar(&o.dbCrash, "db-crash", 0, "kill the database server (SIGKILL) this many times while the orders are placed, restarting it at once; needs --db postgres: or --db mysql: (a private server the run owns)")
	fs.StringVar(&o.failover, "failover", "", "sync or async: run on a private PostgreSQL primary with two streaming standbys (synchronous ANY 1, or asynchronous), kill the primary once half the orders are answered, promote the most advanced standby; the report's \"primary failover\" section counts what was lost with the old primary (without --db)")
	fs.DurationVar(&o.skew, "skew", 0, "give the run's gateways, consumers, payment workers and queue consumers clocks that disagree by this much (+D/2 and -D/2 in turn), 0 to 10m; leases on those clocks become at least 2×D; the report's \"clock skew\" section says which clock each part trusts")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the flow (go tool pprof) to this file")
	fs.BoolVar(&o.verbose, "v", false, "log the warnings of relays and consumers (many, under faults) to stderr")
	return fs, o
}

// check validates the flags before anything starts; its errors name the flag.
func (o *verifyOptions) check() error {
	switch {
	case o.ops <= 0:
		return fmt.Errorf("--ops must be positive (got %d)", o.ops)
	case o.clients <= 0:
		return fmt.Errorf("--clients must be positive (got %d)", o.clients)
	case o.consumers <= 0:
		return fmt.Errorf("--consumers must be positive (got %d)", o.consumers)
	case o.rate < 0 || o.rate > 1:
		return fmt.Errorf("--fault-rate must be between 0 and 1 (got %g)", o.rate)
	case o.brokerLoss < 0 || o.brokerLoss > 1:
		return fmt.Errorf("--broker-loss must be between 0 and 1 (got %g)", o.brokerLoss)
	case o.auditGraceSet && o.auditGrace <= 0:
		return fmt.Errorf("--audit-grace must be positive (got %v)", o.auditGrace)
	case o.relay != "outbox" && o.relay != "cdc":
		return fmt.Errorf("--relay must be outbox or cdc (got %q)", o.relay)
	case o.api != verify.APIHTTP && o.api != verify.APIGRPC:
		return fmt.Errorf("--api must be http or grpc (got %q)", o.api)
	case o.pay != verify.PayFence && o.pay != verify.PayKeyed && o.pay != verify.PayKeyedWriteBehind:
		return fmt.Errorf("--pay must be fence, keyed or keyed-write-behind (got %q)", o.pay)
	case o.broker == "db:" && o.brokerLoss > 0:
		return fmt.Errorf("--broker-loss %g with --broker db:: there is no broker to lose messages (the order and its message commit in one transaction, and the consumers claim from that database); leave --broker-loss 0, or pick a broker", o.brokerLoss)
	case o.failover != "" && o.failover != "sync" && o.failover != "async":
		return fmt.Errorf("--failover must be sync or async (got %q)", o.failover)
	case o.failover != "" && o.relay == "cdc":
		return errors.New("--failover with --relay cdc: the log-based relay's slot does not follow a promotion; leave --relay at outbox")
	case o.skew < 0:
		return fmt.Errorf("--skew must be 0 or more (got %v): it is how far apart the nodes' clocks are, each node off by half of it either way", o.skew)
	case o.skew > verify.MaxSkew:
		return fmt.Errorf("--skew %v is above the limit of %v: the run's request and message deadlines (30 min, which clock jumps of up to ±10 min already use) would no longer tell late from on time; pick %v or less", o.skew, verify.MaxSkew, verify.MaxSkew)
	case o.skew > 0 && o.timeout < 3*o.skew:
		return fmt.Errorf("--skew %v needs --timeout %v or more (got %v): with leases of 2×D, a killed worker's effect waits up to 3×D on the clock furthest behind before it is taken over", o.skew, 3*o.skew, o.timeout)
	case o.broker == "db:" && o.relay == "cdc":
		return errors.New("--relay cdc with --broker db:: no relay runs when the database is the queue; leave --relay at outbox")
	}
	return o.checkDBCrash()
}

// verify opens the run's database and broker, runs the flow and writes the report.
func (m *Main) verify(ctx context.Context, o *verifyOptions) error {
	crasher, stopDB, err := m.privateDB(ctx, o)
	if err != nil {
		return err
	}
	defer stopDB()
	if o.relay == "cdc" {
		stop, err := m.verifyCDCDB(ctx, o)
		if err != nil {
			return err
		}
		defer stop()
	}
	var failover *verify.Failover
	if o.failover != "" {
		fo, stop, err := m.verifyFailoverDB(ctx, o)
		if err != nil {
			return err
		}
		defer stop()
		failover = fo
	}
	openDB := open.VerifyDatabase
	if failover != nil {
		openDB = open.VerifyPostgresDirect // the multi-host URL, which no single proxy fronts
	}
	vdb, err := openDB(ctx, o.db, o.keep)
	if err != nil {
		return err
	}
	defer vdb.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.verbose {
		logger = slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	b, err := open.VerifyBroker(ctx, o.broker, open.RandomHex(4), logger)
	if err != nil {
		return err
	}
	defer b.Close()

	flow := &verify.Flow{
		DB: vdb.DB, Store: vdb.Store, Broker: b, Clock: vdb.Clock, DBProxy: vdb.Proxy,
		Orders: o.ops, Clients: o.clients, Consumers: o.consumers, FaultRate: o.rate, Seed: o.seed,
		Unsafe: o.unsafe, Timeout: o.timeout, Logger: logger, API: o.api, Pay: o.pay,
		BrokerLoss: o.brokerLoss, Repair: o.repair, AuditGrace: o.auditGrace,
		Failover: failover, Skew: o.skew,
	}
	if o.dbCrash > 0 {
		flow.DBCrash, flow.Crasher = o.dbCrash, crasher
	}
	if o.relay == "cdc" {
		done, err := setupVerifyCDC(ctx, flow, o.db)
		if err != nil {
			return err
		}
		defer done()
	}
	if !o.asJSON {
		// The header as soon as it is known: the run takes seconds to minutes.
		head := &verify.Report{Ops: o.ops, Store: vdb.Name, Broker: b.Name(), Seed: o.seed, Unsafe: o.unsafe, API: o.api, Pay: o.pay}
		if err := head.WriteHeader(m.Stdout); err != nil {
			return err
		}
	}
	// The terminal is asked of stderr as given, not of Run's redacting wrapper.
	// With -v the log lines share stderr: plain progress lines, not a \r line.
	isTerm := verify.IsTerminal
	if m.terminal != nil {
		isTerm = m.terminal
	}
	terminal := isTerm(m.help()) && !o.verbose
	bar := verify.NewProgressWriter(m.Stderr, terminal, time.Now)
	flow.Progress = bar.Update
	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	report, err := flow.Run(ctx)
	bar.Clear()
	if err != nil {
		return fmt.Errorf("idem verify: %w", err)
	}
	report.Store = vdb.Name
	if o.asJSON {
		err = report.WriteJSON(m.Stdout)
	} else {
		err = report.WriteResults(m.Stdout)
	}
	if err != nil {
		return err
	}
	if !report.OK() {
		return &cli.ExitError{Msg: "idem verify: effects were lost or doubled"}
	}
	return nil
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
