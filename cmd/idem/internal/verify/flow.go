package verify

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/wait"
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
	// (the clock jumped past the retention window): a documented limit, reported
	// apart from the guarantee.
	FaultLateRetry = "late_retry_past_retention"
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

// Flow is the whole exactly-once flow of idem verify, with faults at every
// boundary: clients place orders over HTTP with Idempotency-Key (idemhttp
// Transport and AtomicMiddleware); the order service writes each order and an
// outbox message in one transaction (outbox); a relay publishes the outbox to the
// broker (outbox.Relay); consumers apply each order to a ledger and a running
// balance in one transaction with the message key (inbox). At the end Run reads
// the databases and reports, per boundary, what was delivered and what took effect.
type Flow struct {
	// DB holds the orders, the outbox, the ledger and the keys. It must be a database
	// the run owns (a new SQLite file, a fresh Postgres schema): Run creates tables.
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
}

// Progress is the state of a running flow.
type Progress struct {
	Placed, Applied, Orders int // orders answered by the service, orders in the ledger, orders to place
	Faults                  int // faults injected so far
	Settling                bool
}

const (
	tableOrders  = "verify_orders"
	tableLedger  = "verify_ledger"
	tableBalance = "verify_balance"
	tablePaid    = "verify_paid"
	consumerName = "ledger"
)

// run is the state of one Run.
type run struct {
	f     *Flow
	txdb  idem.TxDB[*sql.Tx]
	ob    *outbox.Outbox[*sql.Tx]
	inj   *chaos.Injector
	reg   *prometheus.Registry
	log   *slog.Logger
	store idem.TxStore[*sql.Tx]

	received   chaos.Tally  // requests that reached the server, by key
	executions atomic.Int64 // order handler runs
	placed     atomic.Int64
	published  chaos.Tally // messages handed to the broker, by id
	delivered  chaos.Tally // deliveries to consumers, by id
	restarts   atomic.Int64
	paysvc     *paymentService
	push       *pusher
	cutting    sync.Map // *chaos.Proxy → *atomic.Bool, held while the proxy is being cut
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
	if f.Logger == nil {
		f.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Run places the orders, waits for the flow to settle, and checks the databases.
// The error is for failures of the harness itself (a database that cannot be
// set up); lost or doubled effects are in the Report.
func (f *Flow) Run(ctx context.Context) (*Report, error) {
	f.defaults()
	switch {
	case f.DB == nil || f.Broker == nil:
		return nil, errors.New("chaos: Flow needs DB and Broker")
	case !f.Unsafe && f.Store == nil:
		return nil, errors.New("chaos: Flow.Store is nil; set it, or set Unsafe for the negative control")
	}
	txdb, err := idem.SQLDB(ctx, f.DB)
	if err != nil {
		return nil, err
	}
	r := &run{f: f, txdb: txdb, inj: chaos.NewInjector(f.Seed, f.FaultRate), reg: prometheus.NewRegistry(), log: f.Logger, store: f.Store}
	if f.Unsafe {
		r.store = noDedup{}
	}
	if err := r.createTables(ctx); err != nil {
		return nil, err
	}
	if r.ob, err = outbox.New(ctx, txdb); err != nil {
		return nil, err
	}
	start := time.Now()

	srv, url, err := r.startServer()
	if err != nil {
		return nil, err
	}
	defer srv.Close()

	// Relay and consumers run until stop; the first consumer is created here so
	// that its tables exist before the others race to create them.
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	if _, err := inbox.New(ctx, emptySource{}, txdb, r.store, r.ledger, r.inboxConfig()); err != nil {
		stop()
		return nil, err
	}
	if r.paysvc, err = startPaymentService(f.Unsafe); err != nil {
		stop()
		return nil, err
	}
	defer r.paysvc.srv.Close()
	// The fence's leases run on the real clock: a backward jump of the flow's clock
	// (up to minutes) would hold every crashed worker's effect for that long.
	var fence *effect.Fence[*sql.Tx]
	if !f.Unsafe {
		if fence, err = effect.New(ctx, txdb, effect.Config{Lease: paymentLease, Registerer: r.reg, Logger: r.log}); err != nil {
			stop()
			return nil, err
		}
	}
	wg.Go(func() { r.payments(bg, fence, r.paysvc, 2) })
	if r.push, err = r.startPush(ctx); err != nil {
		stop()
		return nil, err
	}
	defer r.push.close()
	wg.Go(func() { r.push.watch(bg) })
	wg.Go(func() { r.superviseRelay(bg) })
	for range f.Consumers {
		wg.Go(func() { r.superviseConsumer(bg) })
	}
	progressDone := r.reportProgress(bg)

	intents := r.intents()
	r.placeAll(ctx, url, intents)
	settled := r.settle(ctx, start)
	if settled && f.Clock != nil && f.FaultRate > 0 && ctx.Err() == nil {
		r.retryLate(ctx, url, intents)
		r.settle(ctx, time.Now())
	}
	elapsed := time.Since(start)
	stop()
	wg.Wait()
	<-progressDone

	rep, err := r.check(context.WithoutCancel(ctx), intents)
	if err != nil {
		return nil, err
	}
	rep.Seed, rep.FaultRate, rep.Ops, rep.Unsafe, rep.Elapsed = f.Seed, f.FaultRate, f.Orders, f.Unsafe, elapsed
	rep.Broker = f.Broker.Name()
	rep.Operations, rep.Faulted = r.inj.Ops(), r.inj.Faulted()
	rep.Faults = r.inj.Counts()
	if n := int(r.restarts.Load()); n > 0 {
		rep.Faults[FaultRestart] = n
	}
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	return rep, nil
}

func (r *run) createTables(ctx context.Context) error {
	for _, stmt := range []string{
		"CREATE TABLE " + tableOrders + " (id TEXT PRIMARY KEY, request_key TEXT NOT NULL, customer TEXT NOT NULL, amount BIGINT NOT NULL, created_at BIGINT NOT NULL)",
		// No unique constraint on order_id: a doubled effect must be visible, not refused.
		"CREATE TABLE " + tableLedger + " (order_id TEXT NOT NULL, amount BIGINT NOT NULL, applied_at BIGINT NOT NULL)",
		"CREATE INDEX " + tableLedger + "_order ON " + tableLedger + " (order_id)",
		"CREATE TABLE " + tableBalance + " (id INTEGER PRIMARY KEY, total BIGINT NOT NULL)",
		"INSERT INTO " + tableBalance + " (id, total) VALUES (1, 0)",
		"CREATE TABLE " + tablePaid + " (order_id TEXT PRIMARY KEY)",
	} {
		if _, err := r.f.DB.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("chaos: set up the flow's tables (the database must be new to the run): %w", err)
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

// --- client → HTTP API → order service → outbox ---

type orderRequest struct {
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

type orderEvent struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

func (r *run) startServer() (*http.Server, string, error) {
	handler := http.Handler(http.HandlerFunc(r.placeOrder))
	if !r.f.Unsafe {
		mw, err := idemhttp.AtomicMiddleware(r.txdb, r.f.Store, idemhttp.Config{
			RequireKey: true, Retention: r.f.Retention, Registerer: r.reg, Logger: r.log,
		})
		if err != nil {
			return nil, "", err
		}
		handler = mw(handler)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", handler)
	counted := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.received.Add(req.Header.Get(idemhttp.HeaderKey))
		mux.ServeHTTP(w, req)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: counted, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(r.log.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String() + "/orders", nil
}

// placeOrder is the order service: the order and its event in one transaction
// (the middleware's, or its own in unsafe mode).
func (r *run) placeOrder(w http.ResponseWriter, req *http.Request) {
	r.executions.Add(1)
	var in orderRequest
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil || in.Amount <= 0 || in.Customer == "" {
		http.Error(w, "body: want {\"customer\": non-empty, \"amount\": > 0}", http.StatusBadRequest)
		return
	}
	id := idemkey.NewV7()
	write := func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(req.Context(), "INSERT INTO "+tableOrders+" (id, request_key, customer, amount, created_at) VALUES ($1, $2, $3, $4, $5)",
			id, req.Header.Get(idemhttp.HeaderKey), in.Customer, in.Amount, r.now().UnixNano()); err != nil {
			return err
		}
		payload, _ := json.Marshal(orderEvent{OrderID: id, Customer: in.Customer, Amount: in.Amount})
		_, err := r.ob.EnqueueTx(req.Context(), tx, idem.Message{ID: id, Topic: r.f.Broker.Topic(), Payload: payload})
		return err
	}
	var err error
	if tx, ok := idemhttp.TxFrom[*sql.Tx](req.Context()); ok {
		err = write(tx)
	} else {
		err = r.txdb.InTx(req.Context(), write)
	}
	if err != nil {
		http.Error(w, "order service: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{"order_id": id})
}

// intents derives the orders from the seed: keys, customers and amounts.
func (r *run) intents() []intent {
	rng := rand.New(rand.NewPCG(uint64(r.f.Seed), 0x1de))
	out := make([]intent, r.f.Orders)
	for i := range out {
		id, _ := uuid.NewRandomFromReader(rngReader{rng})
		out[i] = intent{key: id.String(), customer: fmt.Sprintf("c%03d", rng.IntN(500)), amount: 1 + rng.Int64N(1000)}
	}
	return out
}

func (r *run) client() *http.Client {
	base := &http.Transport{MaxIdleConnsPerHost: r.f.Clients * 2, ResponseHeaderTimeout: 30 * time.Second}
	faults := []chaos.Fault{{Kind: chaos.FaultDropResponse, Weight: 4}, {Kind: chaos.FaultDuplicateRequest, Weight: 3}}
	if r.f.Clock != nil {
		faults = append(faults, chaos.Fault{Kind: FaultClockJump, Weight: 0.2})
	}
	if r.f.DBProxy != nil {
		faults = append(faults, chaos.Fault{Kind: FaultDBCut, Weight: 0.3})
	}
	if r.f.Broker.Proxy() != nil {
		faults = append(faults, chaos.Fault{Kind: FaultBrokerCut, Weight: 0.3})
	}
	ct := &chaos.Transport{Base: base, Injector: r.inj, Faults: faults, OnFault: r.onFault}
	return &http.Client{Transport: &idemhttp.Transport{Base: ct, MaxAttempts: 8, MinBackoff: 2 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond, MaxElapsed: time.Minute, Logger: r.log}}
}

// onFault injects the faults that are not about one request.
func (r *run) onFault(kind string) {
	switch kind {
	case FaultClockJump:
		// ±(30 s to 3 min), the total kept within ±10 min: leases expire and come
		// back, and retention (hours) is never crossed by accident.
		d := time.Duration(30+rand.IntN(150)) * time.Second
		if off := r.f.Clock.Offset(); off > 7*time.Minute || (off > -7*time.Minute && rand.IntN(2) == 0) {
			d = -d
		}
		r.f.Clock.Jump(d)
	case FaultDBCut:
		r.cut(r.f.DBProxy, kind)
	case FaultBrokerCut:
		r.cut(r.f.Broker.Proxy(), kind)
	}
}

// cut cuts p's connections in the background, one cut of p at a time and at
// most one every quarter second, so that the flow makes progress between cuts; a cut
// that does not happen is taken back from the fault counts.
func (r *run) cut(p *chaos.Proxy, kind string) {
	v, _ := r.cutting.LoadOrStore(p, new(atomic.Bool))
	busy := v.(*atomic.Bool)
	if !busy.CompareAndSwap(false, true) {
		r.inj.Cancel(kind)
		return
	}
	go func() {
		defer busy.Store(false)
		if err := p.Cut(20 * time.Millisecond); err != nil {
			r.log.Warn("chaos: proxy cut", "err", err)
		}
		time.Sleep(250 * time.Millisecond)
	}()
}

// placeAll runs the client fleet: each order is placed with its own key, retried
// by idemhttp.Transport and, when the Transport gives up, by the client itself
// with the same key, up to 5 times.
func (r *run) placeAll(ctx context.Context, url string, intents []intent) {
	client := r.client()
	defer client.CloseIdleConnections()
	next := make(chan int)
	var wg sync.WaitGroup
	for range r.f.Clients {
		wg.Go(func() {
			for i := range next {
				r.place(ctx, client, url, &intents[i])
				r.placed.Add(1)
			}
		})
	}
	for i := range intents {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
}

func (r *run) place(ctx context.Context, client *http.Client, url string, in *intent) (id string, ok bool) {
	body, _ := json.Marshal(orderRequest{Customer: in.customer, Amount: in.amount})
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return "", false
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idemhttp.HeaderKey, in.key)
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		var out struct {
			OrderID string `json:"order_id"`
		}
		derr := json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated && derr == nil {
			if !in.accepted {
				in.accepted, in.orderID = true, out.OrderID
			}
			return out.OrderID, true
		}
		if resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusTooManyRequests {
			r.log.Warn("chaos: order refused", "key", in.key, "status", resp.StatusCode)
			return "", false
		}
	}
	return "", false
}

// retryLate moves the clock past the retention window and retries a few accepted
// orders with their original keys: the server no longer remembers them.
func (r *run) retryLate(ctx context.Context, url string, intents []intent) {
	n := max(1, len(intents)/1000)
	// No more faults: this phase shows the window's documented limit at HTTP. A
	// consumer restart now would make Kafka replay old messages from its last
	// committed offset, past their keys' retention too, and the run would count
	// them as applied again: the same limit, where the checker of the later
	// boundaries does not expect it.
	r.inj.Calm()
	// Past the window from every key, whatever the earlier jumps (±10 min) did.
	r.f.Clock.Jump(r.f.Retention + 15*time.Minute - r.f.Clock.Offset())
	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 8, MinBackoff: 2 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Logger: r.log}}
	defer client.CloseIdleConnections()
	rng := rand.New(rand.NewPCG(uint64(r.f.Seed), 0x1a7e))
	for range n {
		in := intents[rng.IntN(len(intents))]
		if !in.accepted {
			continue
		}
		r.inj.Count(FaultLateRetry)
		r.place(ctx, client, url, &in)
	}
}

// --- outbox → broker ---

func (r *run) superviseRelay(ctx context.Context) {
	faults := []chaos.Fault{{Kind: chaos.FaultRelayCrash, Weight: 2}, {Kind: chaos.FaultPublishError, Weight: 1}}
	if r.f.Broker.Proxy() != nil {
		faults = append(faults, chaos.Fault{Kind: FaultBrokerCut, Weight: 0.3})
	}
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			r.restarts.Add(1)
		}
		rctx, kill := context.WithCancel(ctx)
		sink, err := r.f.Broker.OpenSink(rctx)
		if err != nil {
			r.log.Warn("chaos: open sink", "err", err)
			kill()
			wait.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		cs := &chaos.Sink{Sink: sink, Injector: r.inj, Faults: faults, Kill: kill, OnFault: r.onFault, Tally: &r.published}
		relay, err := r.ob.Relay(cutSink{cs, r}, outbox.RelayConfig{
			BatchSize: 100, PollInterval: 20 * time.Millisecond, MaxAttempts: 1000,
			Backoff: func(int) time.Duration { return 20 * time.Millisecond },
			Logger:  r.log,
		})
		if err == nil {
			err = relay.Run(rctx)
		}
		kill()
		if err != nil && ctx.Err() == nil && rctx.Err() == nil {
			r.log.Warn("chaos: relay stopped", "err", err)
			wait.Sleep(ctx, 50*time.Millisecond)
		}
		if c, ok := sink.(io.Closer); ok {
			_ = c.Close()
		}
	}
}

// cutSink turns the broker cut fault of a publish into a real cut.
type cutSink struct {
	s *chaos.Sink
	r *run
}

func (c cutSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	err := c.s.Publish(ctx, msgs...)
	if err == nil {
		return nil
	}
	if errors.Is(err, chaos.ErrInjected) {
		return err
	}
	// A failure of the broker connection: start over on a fresh one, as a
	// supervised relay process would.
	c.s.Kill()
	return err
}

// --- broker → consumer → ledger ---

func (r *run) inboxConfig() inbox.Config {
	return inbox.Config{
		Consumer: consumerName, BatchSize: 32, MaxAttempts: 100, Retention: r.f.Retention,
		Backoff:    func(int) time.Duration { return 20 * time.Millisecond },
		Registerer: r.reg, Logger: r.log,
	}
}

// ledger applies one order: a ledger entry and the running balance.
func (r *run) ledger(ctx context.Context, tx *sql.Tx, m idem.Message) error {
	var ev orderEvent
	if err := json.Unmarshal(m.Payload, &ev); err != nil || ev.OrderID == "" {
		return inbox.Permanent(fmt.Errorf("payload: want {\"order_id\", \"amount\"}: %v", err))
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+tableLedger+" (order_id, amount, applied_at) VALUES ($1, $2, $3)",
		ev.OrderID, ev.Amount, r.now().UnixNano()); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+tableBalance+" SET total = total + $1 WHERE id = 1", ev.Amount); err != nil {
		return err
	}
	return r.push.appendTx(ctx, tx, ev)
}

func (r *run) superviseConsumer(ctx context.Context) {
	faults := []chaos.Fault{{Kind: chaos.FaultDuplicateDelivery, Weight: 3}}
	if c, ok := r.f.Broker.(CumulativeAcker); !ok || !c.CumulativeAcks() {
		faults = append(faults, chaos.Fault{Kind: chaos.FaultLostAck, Weight: 2})
	}
	if r.f.Broker.Proxy() != nil {
		faults = append(faults, chaos.Fault{Kind: FaultBrokerCut, Weight: 0.3})
	}
	batch := []chaos.Fault{{Kind: chaos.FaultCrashBeforeEffect, Weight: 1}, {Kind: chaos.FaultCrashAfterEffect, Weight: 1}, {Kind: chaos.FaultCrashAfterCommit, Weight: 1}}
	if r.f.Consumers > 1 {
		batch = append(batch, chaos.Fault{Kind: chaos.FaultPaused, Weight: 0.3, Max: 3})
	}
	pause := r.f.Broker.AckWait() + 500*time.Millisecond
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			r.restarts.Add(1)
		}
		cctx, kill := context.WithCancel(ctx)
		src, err := r.f.Broker.OpenSource(cctx)
		if err != nil {
			r.log.Warn("chaos: open source", "err", err)
			kill()
			wait.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		cs := &chaos.Source{Source: src, Injector: r.inj, Faults: faults, BatchFaults: batch, BatchScale: 0.25, Kill: kill, Tally: &r.delivered}
		c, err := inbox.New(cctx, cutSource{cs, r}, r.txdb, r.store, chaos.Handler(r.ledger, pause, kill), r.inboxConfig())
		if err == nil {
			err = c.Run(cctx)
		}
		kill()
		_ = src.Close()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			r.log.Warn("chaos: consumer stopped", "err", err)
			wait.Sleep(ctx, 50*time.Millisecond)
		}
	}
}

// cutSource turns a broker cut fault chosen for a delivery into a real cut.
type cutSource struct {
	s *chaos.Source
	r *run
}

func (c cutSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := c.s.Receive(ctx, max)
	if err != nil && ctx.Err() == nil {
		// A broken broker connection (RabbitMQ's does not recover by itself):
		// start over on a fresh one, as a supervised consumer process would.
		c.s.Kill()
	}
	for _, d := range ds {
		if d.Headers[chaos.HeaderFault] == FaultBrokerCut {
			c.r.cut(c.r.f.Broker.Proxy(), FaultBrokerCut)
		}
	}
	return ds, err
}

func (c cutSource) Close() error { return c.s.Close() }

// --- settling ---

// settle waits until every order is published and applied and the deliveries have
// stopped for longer than the broker's ack wait (so late redeliveries are counted),
// or until the timeout. It reports whether the flow settled.
func (r *run) settle(ctx context.Context, since time.Time) bool {
	deadline := time.Now().Add(r.f.Timeout)
	quiet := r.f.Broker.AckWait() + time.Second
	last, lastChange := -1, time.Now()
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if n := r.delivered.Total(); n != last {
			last, lastChange = n, time.Now()
		}
		pending, err := r.pending(ctx)
		if err == nil && pending == 0 && time.Since(lastChange) >= quiet {
			return true
		}
		wait.Sleep(ctx, 100*time.Millisecond)
	}
	return false
}

// pending counts orders not yet published, applied to the ledger or paid.
func (r *run) pending(ctx context.Context) (int, error) {
	var unpublished, unapplied int
	err := r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM idem_outbox WHERE published_at IS NULL").Scan(&unpublished)
	if err != nil {
		return 0, err
	}
	err = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tableOrders+" o WHERE NOT EXISTS (SELECT 1 FROM "+tableLedger+" l WHERE l.order_id = o.id)").Scan(&unapplied)
	if err != nil {
		return 0, err
	}
	var unpaid int
	err = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tableOrders+" o WHERE NOT EXISTS (SELECT 1 FROM "+tablePaid+" p WHERE p.order_id = o.id)").Scan(&unpaid)
	if err != nil {
		return 0, err
	}
	unshown, err := r.push.pending(ctx)
	return unpublished + unapplied + unpaid + unshown, err
}

func (r *run) reportProgress(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if r.f.Progress == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			var applied int
			_ = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(DISTINCT order_id) FROM "+tableLedger).Scan(&applied)
			placed := int(r.placed.Load())
			r.f.Progress(Progress{Placed: placed, Applied: applied, Orders: r.f.Orders, Faults: r.inj.Total(), Settling: placed >= r.f.Orders})
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return done
}

// noDedup is the unsafe mode's store: every key is new, every time.
type noDedup struct{}

func (noDedup) ClaimTx(context.Context, *sql.Tx, idem.Claim) (idem.Result, error) {
	return idem.Result{Outcome: idem.Acquired, Token: 1}, nil
}
func (noDedup) CompleteTx(context.Context, *sql.Tx, idem.Key, uint64, []byte) error { return nil }
func (noDedup) ReleaseTx(context.Context, *sql.Tx, idem.Key, uint64) error          { return nil }

// emptySource lets inbox.New create its tables before the consumers start.
type emptySource struct{}

func (emptySource) Receive(ctx context.Context, _ int) ([]idem.Delivery, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (emptySource) Close() error { return nil }

// rngReader adapts a math/rand/v2 source to io.Reader for seeded UUIDs.
type rngReader struct{ r *rand.Rand }

func (r rngReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r.r.Uint32())
	}
	return len(p), nil
}
