package verify

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/outbox"
)

// Faults the flow ties to operations through OnFault hooks.
const (
	// FaultClockJump: the clock that drives the stores' leases and retention jumps
	// forwards or backwards by up to a few minutes.
	FaultClockJump = "clock_jump"
	// FaultDBCut: every database connection is cut (through a Proxy).
	FaultDBCut = "db_connection_cut"
	// FaultBrokerCut: every broker connection is cut (through a Proxy).
	FaultBrokerCut = "broker_connection_cut"
	// FaultLateRetry: a client retries an order after the server forgot its key
	// (the clock jumped past the retention window). Its key carries its time, so
	// idem refuses it (410); without idem it is applied again (late applied).
	FaultLateRetry = "late_retry_past_retention"
	// FaultPastDeadline: an order's first request reaches the server after its
	// Idem-Deadline, when its client had given up and placed the order again. idem
	// refuses it (412); without idem it makes a second order (late applied).
	FaultPastDeadline = "http_past_deadline"
	// FaultMessagePastDeadline: the order service writes an order's event with an
	// Idem-Deadline (outbox.WithDeadline) that has passed by the time a consumer
	// reads it, as if it had waited in the outbox past it. idem's inbox refuses it
	// (dead-lettered as "deadline"; the order is neither applied nor charged);
	// without idem it is applied (late applied). Counted per order written.
	FaultMessagePastDeadline = "message_past_deadline"
	// FaultRestart counts relay and consumer processes started again after a crash.
	FaultRestart = "process_restart"
)

// Broker is the message broker of a Flow. The flow opens a sink for every relay
// process and a source for every consumer process it starts, so a crashed process
// comes back on connections of its own where the broker needs it.
type Broker interface {
	// Name describes the broker in reports ("nats (embedded)").
	Name() string
	// Topic is the subject, topic, stream or queue the orders are published to.
	Topic() string
	OpenSink(ctx context.Context) (idem.Sink, error)
	OpenSource(ctx context.Context) (idem.Source, error)
	// AckWait is how long a delivery may stay unacknowledged before the broker
	// delivers it again (JetStream AckWait, Redis MinIdle).
	AckWait() time.Duration
	// Proxy is the proxy the broker connections go through, or nil.
	Proxy() *chaos.Proxy
	// Stored is the number of messages the broker holds, when it can tell: the
	// broker's own dedup is the difference with what was published.
	Stored(ctx context.Context) (n int, ok bool)
}

// CumulativeAcker is implemented by a Broker whose acks are cumulative offsets
// (Kafka): a consumer commits "everything up to here", so a lost commit is healed
// by the next one and an ack lost for a single message is not a fault such a broker
// has. Flow injects no chaos.FaultLostAck on it; crashes before the ack still apply.
type CumulativeAcker interface {
	CumulativeAcks() bool
}

// UnsettledKeeper is implemented by a Broker that redelivers an unsettled
// delivery only when its consumer's channel closes (RabbitMQ: AMQP has no ack
// wait). Its lost acks are Naks of its AckWait (chaos.Source.KeepsUnsettled).
type UnsettledKeeper interface {
	KeepsUnsettled() bool
}

// The order APIs a Flow can place its orders through (Flow.API).
const (
	// APIHTTP: POST /orders with Idempotency-Key (idemhttp), the default.
	APIHTTP = "http"
	// APIGRPC: Orders.PlaceOrder (internal/orderspb) with the idempotency-key
	// metadata (idemgrpc).
	APIGRPC = "grpc"
)

// How the payment workers go through their effect fences (Flow.Pay).
const (
	// PayFence: Fence.Do, PENDING before the call and COMPLETE after it, under a
	// lease; the default.
	PayFence = "fence"
	// PayKeyed: Fence.DoKeyed, the keyed path for a downstream that deduplicates by
	// the key (the run's payment service does): a read, the call, one record.
	PayKeyed = "keyed"
	// PayKeyedWriteBehind: DoKeyed with effect.Config.KeyedWriteBehind, the record
	// written after DoKeyed returns.
	PayKeyedWriteBehind = "keyed-write-behind"
)

// Flow is the whole exactly-once flow of idem verify, with faults at every
// boundary: clients place orders over HTTP with Idempotency-Key (idemhttp
// Transport and AtomicMiddleware), or over gRPC (idemgrpc's interceptors and
// grpc-go's retry policy); the order service writes each order and an
// outbox message in one transaction (outbox); a relay publishes the outbox to the
// broker (outbox.Relay); consumers apply each order to a ledger and a running
// balance in one transaction with the message key (inbox). At the end Run reads
// the databases and reports, per boundary, what was delivered and what took effect.
type Flow struct {
	// DB holds the orders, the outbox, the ledger and the keys: SQLite, PostgreSQL or
	// MySQL/MariaDB. It must be a database the run owns (a new SQLite file, a fresh
	// Postgres schema or MySQL database): Run creates tables. The flow's own
	// statements go through the TxDB's Querier, which rebinds $N for MySQL.
	DB *sql.DB
	// Store records the keys of requests and messages in their transactions.
	// Required unless Unsafe.
	Store  idem.TxStore[*sql.Tx]
	Broker Broker
	// Clock, if set, is the clock that drives Store's expiry: clock jumps are injected
	// on it, and a few orders are retried after the retention window (late retries).
	Clock *chaos.Clock
	// DBProxy, if set, is the proxy DB's connections go through: cuts are injected.
	DBProxy *chaos.Proxy

	// API is the order API the clients call: APIHTTP (the default) or APIGRPC.
	// Its row is BoundaryHTTP or BoundaryGRPC.
	API string
	// Pay is how the payment workers go through their fences: PayFence (the
	// default), PayKeyed or PayKeyedWriteBehind.
	Pay string

	Orders    int     // orders to place; default 10,000
	Clients   int     // concurrent clients; default 16
	Consumers int     // concurrent consumer processes; default 2
	FaultRate float64 // fraction of operations hit by a fault at each boundary
	Seed      int64
	// Unsafe turns idem's protection off: no idempotency middleware, no inbox
	// dedup. Everything else (retries, redeliveries, faults) is the same: the plain
	// at-least-once flow, which the checker must catch doubling effects.
	Unsafe bool
	// Retention is the key retention of Store (HTTP and inbox). Default 24 h.
	Retention time.Duration
	// Timeout bounds the wait for the flow to settle once the clients are done.
	// Default 2 minutes; what has not arrived by then is reported lost.
	Timeout time.Duration
	// Progress, if set, is called a few times a second while the flow runs.
	Progress func(Progress)
	// Logger receives the warnings of relays and consumers (expected under faults).
	// Nil discards them.
	Logger *slog.Logger
	// CDC, if set, relays the outbox from PostgreSQL's WAL (idempg/pgcdc) instead of
	// polling the table; the relay row is then "outbox → broker (cdc)".
	CDC *CDC
	// BrokerLoss is the fraction of messages the broker acknowledges and then
	// loses (FaultBrokerLoss), 0 to 1; 0 loses none.
	BrokerLoss float64
	// Repair lets the run's audit (package audit, every second over the run's
	// database) republish the messages it finds missing. Without it the audit
	// only reads, and a message the broker lost is lost. With Unsafe the audit
	// only reads: the consumer keeps no keys, it is blind.
	Repair bool
	// AuditGrace is the audit's grace: a message published longer ago and not
	// applied is missing (and, with Repair, republished). Default
	// DefaultAuditGrace plus the broker's AckWait; keep it above the consumers'
	// lag, or messages merely behind are republished (needlessly: the inbox drops
	// the copies by key).
	AuditGrace time.Duration
	// DBCrash is how many times the database server is killed (SIGKILL) and
	// restarted through Crasher while the clients place orders: after
	// Orders*i/(DBCrash+1) orders were acknowledged, for i = 1…DBCrash. 0: none.
	DBCrash int
	// Crasher kills and restarts the database server; required when DBCrash > 0.
	Crasher DBCrasher
	// Failover, if set, kills the database's primary once half the orders are
	// answered and promotes a standby (idem verify --failover); the report then
	// has its section. DB must reach the primary by a URL that follows it.
	Failover *Failover
	// Skew, if positive, gives every gateway (HTTP: two of them, the clients
	// split between them), consumer process, payment worker and queue consumer a
	// clock of its own, offset by +Skew/2 or −Skew/2 in turn (idem verify
	// --skew); the leases read on those clocks become at least 2×Skew, and the
	// report has a "clock skew" section. At most MaxSkew.
	Skew time.Duration
}

// Progress is the state of a running flow.
type Progress struct {
	Placed, Applied, Orders int // orders answered by the service, orders in the ledger, orders to place
	Paid                    int // orders the payment API charged: the flow's last step but the push
	Faults                  int // faults injected so far
	Settling                bool
}

const (
	tableOrders  = "verify_orders"
	tableLedger  = "verify_ledger"
	tableBalance = "verify_balance"
	tablePaid    = "verify_paid"
	// tableUnpaid holds the applied orders not yet paid: the payment workers' queue,
	// written in the ledger's transaction, so a poll reads the few waiting orders
	// instead of every order of the run.
	tableUnpaid  = "verify_unpaid"
	consumerName = "ledger"
)

// run is the state of one Run.
type run struct {
	f     *Flow
	txdb  idemsql.TxDB[*sql.Tx]
	ob    *outbox.Outbox[*sql.Tx]
	inj   *chaos.Injector
	reg   *prometheus.Registry
	log   *slog.Logger
	store idem.TxStore[*sql.Tx]

	received chaos.Tally // requests that reached the server, by key
	// pastDeadline maps the key of each request sent past its deadline to its
	// order's key (FaultPastDeadline).
	pastDeadline sync.Map
	executions   atomic.Int64 // order handler runs
	// heldCopies holds the keys of the gRPC calls sent past their deadline that
	// reached the server (FaultGRPCPastDeadline); dropped the tokens of the calls
	// whose response was dropped once (FaultGRPCDropResponse).
	heldCopies, dropped sync.Map
	placed              atomic.Int64
	published           chaos.Tally  // messages handed to the broker, by id
	sent                chaos.Tally  // of those, the ones no injected publish error stopped
	stored              storedSet    // messages the broker acknowledged, by id (CDC)
	delivered           chaos.Tally  // deliveries to consumers, by id
	firsts              chaos.Tally  // deliveries the broker numbered first (Attempt 1), by id
	acksFailed          atomic.Int64 // acks of deliveries that returned an error
	restarts            atomic.Int64
	lateEvents          int // orders written whose event carries a passed deadline (check)
	paysvc              *paymentService
	push                *pusher
	cutting             sync.Map  // *chaos.Proxy → *atomic.Bool, held while the proxy is being cut
	losses              *losses   // the messages the broker lost (Flow.BrokerLoss), or nil
	audit               *auditing // nil when it could not be set up (auditErr)
	auditErr            error
	queue               *queueRun       // the database as the queue (--broker db:), or nil; then ob is nil
	crashes             *crashes        // the database crashes (Flow.DBCrash), or nil
	accepted            atomic.Int64    // orders the service answered 201
	warnings            atomic.Int64    // warnings logged by the run's components
	stopped             atomic.Int64    // relays and consumers that stopped on an error of their own (not a kill) and were started again
	fo                  *FailoverReport // Flow.Failover's, once it started
	payLease            time.Duration   // the effect fence's lease: paymentLease, longer with Flow.Skew
	consumerSlots       atomic.Int64    // consumer processes numbered, for their clocks (Flow.Skew)
	skewMu              sync.Mutex
	skewNodes           []SkewNode
}

// intent is one order a client means to place once.
type intent struct {
	key      string
	customer string
	amount   int64
	accepted bool   // the client got 201
	orderID  string // from the 201
}

func (f *Flow) defaults() {
	if f.API == "" {
		f.API = APIHTTP
	}
	if f.Pay == "" {
		f.Pay = PayFence
	}
	if f.Orders <= 0 {
		f.Orders = 10000
	}
	if f.Clients <= 0 {
		f.Clients = 16
	}
	if f.Consumers <= 0 {
		f.Consumers = 2
	}
	if f.Retention <= 0 {
		f.Retention = idem.DefaultRetention
	}
	if f.Timeout <= 0 {
		f.Timeout = 2 * time.Minute
	}
	if f.AuditGrace <= 0 && f.Broker != nil {
		// A delivery held by a paused consumer (or behind one: the ledger's balance
		// row) comes back after the broker's redelivery wait; a grace shorter than
		// that republishes what was merely held, and a broker without a duplicate
		// window (Pub/Sub, whose leases last at least 10 s) delivers every copy.
		f.AuditGrace = DefaultAuditGrace + f.Broker.AckWait()
	}
	if f.Logger == nil {
		f.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Run places the orders, waits for the flow to settle, and checks the databases.
// The error is for failures of the harness itself (a database that cannot be
// set up); lost or doubled effects are in the Report.
func (f *Flow) Run(ctx context.Context) (*Report, error) {
	r, err := f.newRun(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	api, err := r.startAPI()
	if err != nil {
		return nil, err
	}
	defer api.close()
	stop, closeAll, err := r.startBackground(ctx)
	if err != nil {
		return nil, err
	}
	defer closeAll()

	intents := r.intents()
	if err := r.placeAll(ctx, api, intents); err != nil {
		stop()
		return nil, err
	}
	settled := r.settle(ctx, start)
	if settled && f.Clock != nil && f.FaultRate > 0 && ctx.Err() == nil {
		if err := r.retryLate(ctx, api, intents); err != nil {
			stop()
			return nil, err
		}
		settled = r.settle(ctx, time.Now())
	}
	elapsed := time.Since(start)
	var pending *Pending
	if !settled {
		if b, err := r.backlog(context.WithoutCancel(ctx)); err == nil { // before stop, so the count is of this moment
			pending = &b
		}
	}
	stop()
	rep, err := r.report(ctx, intents, elapsed)
	if rep != nil && pending != nil {
		rep.Unsettled, rep.Pending = pending.Total(), pending
	}
	return rep, err
}

// newRun checks f, applies its defaults and sets up the run's tables and outbox.
func (f *Flow) newRun(ctx context.Context) (*run, error) {
	f.defaults()
	switch {
	case f.DB == nil || f.Broker == nil:
		return nil, errors.New("verify: Flow needs DB and Broker")
	case !f.Unsafe && f.Store == nil:
		return nil, errors.New("verify: Flow.Store is nil; set it, or set Unsafe for the negative control")
	case f.API != APIHTTP && f.API != APIGRPC:
		return nil, fmt.Errorf("verify: Flow.API is %q; want %q or %q", f.API, APIHTTP, APIGRPC)
	case f.Pay != PayFence && f.Pay != PayKeyed && f.Pay != PayKeyedWriteBehind:
		return nil, fmt.Errorf("verify: Flow.Pay is %q; want %q, %q or %q", f.Pay, PayFence, PayKeyed, PayKeyedWriteBehind)
	case f.BrokerLoss < 0 || f.BrokerLoss > 1:
		return nil, fmt.Errorf("verify: Flow.BrokerLoss is %g; want 0 to 1", f.BrokerLoss)
	case f.DBCrash < 0:
		return nil, fmt.Errorf("verify: Flow.DBCrash is %d; want 0 or more", f.DBCrash)
	case f.DBCrash > 0 && f.Crasher == nil:
		return nil, errors.New("verify: Flow.DBCrash needs Flow.Crasher, what kills and restarts the database server")
	case f.Skew < 0 || f.Skew > MaxSkew:
		return nil, fmt.Errorf("verify: Flow.Skew is %v; want 0 to %v", f.Skew, MaxSkew)
	case f.dbQueue() && (f.BrokerLoss > 0 || f.CDC != nil):
		return nil, errors.New("verify: the database as the queue has no broker to lose messages (Flow.BrokerLoss) and no relay (Flow.CDC)")
	}
	txdb, err := idemsql.SQLDB(ctx, f.DB)
	if err != nil {
		return nil, err
	}
	r := &run{f: f, txdb: txdb, inj: chaos.NewInjector(f.Seed, f.FaultRate), reg: prometheus.NewRegistry(), store: f.Store,
		payLease: f.skewLease(paymentLease)}
	r.log = slog.New(countingHandler{f.Logger.Handler(), &r.warnings})
	if f.Unsafe {
		r.store = noDedup{}
	}
	if f.DBCrash > 0 {
		r.crashes = &crashes{stats: DBCrashStats{Asked: f.DBCrash}}
	}
	if err := r.createTables(ctx); err != nil {
		return nil, err
	}
	if f.dbQueue() {
		if err := r.newQueue(ctx); err != nil {
			return nil, err
		}
	} else if r.ob, err = outbox.New(ctx, txdb, outbox.Config{}); err != nil {
		return nil, err
	}
	if f.BrokerLoss > 0 {
		r.losses = newLosses(f.BrokerLoss, f.Seed, repairedIn(txdb), func() { r.inj.Count(FaultBrokerLoss) })
	}
	return r, nil
}

// startBackground starts everything but the clients: the payment service and its
// workers, the push server and its watchers, the relay and the consumers. They run
// until stop; closeAll then closes the servers (after the check).
func (r *run) startBackground(ctx context.Context) (stop, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (func(), func(), error) {
		closeAll()
		return nil, nil, err
	}
	// The first consumer is created here so that its tables exist before the
	// others race to create them.
	if _, err := inbox.New(ctx, emptySource{}, r.txdb, r.store, r.ledger, r.inboxConfig(nil)); err != nil {
		return fail(err)
	}
	if r.paysvc, err = startPaymentService(r.f.Unsafe); err != nil {
		return fail(err)
	}
	closers = append(closers, func() { r.paysvc.srv.Close() })
	// The fences' leases run on the real clock: a backward jump of the flow's clock
	// (up to minutes) would hold every crashed worker's effect for that long. Each
	// worker has a fence of its own, on its own clock with Flow.Skew.
	fences := make([]*effect.Fence[*sql.Tx], paymentWorkers)
	if !r.f.Unsafe {
		for i := range fences {
			off := r.f.skewOffset(i) // 0 without Flow.Skew
			if fences[i], err = effect.New(ctx, r.txdb, effect.Config{Lease: r.payLease, Now: wallAt(off), Registerer: r.reg, Logger: r.log,
				KeyedWriteBehind: r.f.Pay == PayKeyedWriteBehind}); err != nil {
				return fail(err)
			}
			r.skewNode(fmt.Sprintf("payment worker %d", i+1), off, "effect fence: leases and takeovers")
		}
	}
	if r.push, err = r.startPush(ctx); err != nil {
		return fail(err)
	}
	closers = append(closers, r.push.close)
	// An audit that cannot be set up (a driver without its statements) is said
	// in the report; the run goes on without it. The audit reads the outbox,
	// which the database as the queue does not use.
	if r.queue == nil {
		r.audit, r.auditErr = r.newAuditing()
	}

	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { r.payments(bg, fences, r.paysvc) })
	wg.Go(func() { r.push.watch(bg) })
	if r.queue == nil {
		wg.Go(func() { r.superviseRelay(bg) })
	}
	wg.Go(func() { r.nodeFaults(bg) })
	if r.crashes != nil {
		wg.Go(func() { r.crashDB(bg) })
	}
	if r.f.Failover != nil {
		wg.Go(func() { r.failover(bg) })
	}
	if r.audit != nil {
		wg.Go(func() { r.audit.loop(bg) })
	}
	for range r.f.Consumers {
		if r.queue != nil {
			wg.Go(func() { r.superviseDBConsumer(bg) })
		} else {
			wg.Go(func() { r.superviseConsumer(bg) })
		}
	}
	progressDone := r.reportProgress(bg)
	stop = func() {
		cancel()
		wg.Wait()
		<-progressDone
	}
	return stop, closeAll, nil
}

// report checks the databases and fills in the run's setup and faults.
func (r *run) report(ctx context.Context, intents []intent, elapsed time.Duration) (*Report, error) {
	f := r.f
	rep, err := r.check(context.WithoutCancel(ctx), intents)
	if err != nil {
		return nil, err
	}
	rep.Seed, rep.FaultRate, rep.Ops, rep.Unsafe, rep.Elapsed = f.Seed, f.FaultRate, f.Orders, f.Unsafe, elapsed
	rep.Broker, rep.API, rep.Pay = f.Broker.Name(), f.API, f.Pay
	rep.Operations, rep.Faulted = r.inj.Ops(), r.inj.Faulted()
	rep.Faults = r.inj.Counts()
	if r.lateEvents > 0 {
		rep.Faults[FaultMessagePastDeadline] = r.lateEvents
	}
	if n := int(r.restarts.Load()); n > 0 {
		rep.Faults[FaultRestart] = n
	}
	rep.BrokerLoss = f.BrokerLoss
	if r.crashes != nil {
		rep.DBCrash = r.crashes.summary(r, context.WithoutCancel(ctx))
	}
	var lost map[string]bool
	if r.losses != nil {
		lost = r.losses.ids()
	}
	if r.queue != nil {
		rep.Audit = &Audit{Skipped: "the audit reads the outbox (idem_outbox), which the database as the queue does not use; the queue's rows and the checks above account for every message"}
	} else if rep.Audit, err = r.auditSummary(context.WithoutCancel(ctx), lost); err != nil {
		rep.Audit = &Audit{Repair: f.Repair && !f.Unsafe, Error: err.Error()}
	}
	if r.fo != nil {
		if err := r.failoverSummary(context.WithoutCancel(ctx), rep); err != nil {
			return nil, err
		}
		rep.Failover = r.fo
	}
	if f.Skew > 0 {
		rep.Skew = r.skewSummary(rep)
	}
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	return rep, nil
}

func (r *run) createTables(ctx context.Context) error {
	// MySQL cannot key or index a TEXT column; VARCHAR(255) holds every id here.
	text := r.txdb.Driver.Migrate().KeyText
	for _, stmt := range []string{
		"CREATE TABLE " + tableOrders + " (id " + text + " PRIMARY KEY, request_key " + text + " NOT NULL, customer " + text + " NOT NULL, amount BIGINT NOT NULL, created_at BIGINT NOT NULL)",
		// No unique constraint on order_id: a doubled effect must be visible, not refused.
		"CREATE TABLE " + tableLedger + " (order_id " + text + " NOT NULL, amount BIGINT NOT NULL, applied_at BIGINT NOT NULL)",
		"CREATE INDEX " + tableLedger + "_order ON " + tableLedger + " (order_id)",
		"CREATE TABLE " + tableBalance + " (id INTEGER PRIMARY KEY, total BIGINT NOT NULL)",
		"INSERT INTO " + tableBalance + " (id, total) VALUES (1, 0)",
		"CREATE TABLE " + tablePaid + " (order_id " + text + " PRIMARY KEY)",
		"CREATE TABLE " + tableUnpaid + " (order_id " + text + " PRIMARY KEY)",
	} {
		if _, err := r.f.DB.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("set up the flow's tables (the database must be new to the run): %w", err)
		}
	}
	return nil
}

func (r *run) now() time.Time {
	if r.f.Clock != nil {
		return r.f.Clock.Now()
	}
	return time.Now()
}
