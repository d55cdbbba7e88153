package verify

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/wait"
	"github.com/idemhq/idem/queue"
)

// The database as the queue (--broker db:): the order service enqueues each
// order's event into idem_queue in the order's transaction (queue.EnqueueTx), no
// relay runs, and the consumers are inbox consumers whose Source is a queue
// Source on the same database, so each message is retired in its effect's
// transaction (inbox.TxSource). With Flow.Unsafe the consumers are the plain
// at-least-once queue instead: the message retired after the commit, no keys.

// Boundary names of a run with the database as the queue. They replace
// BoundaryOutbox, BoundaryRelay (none: no relay runs) and BoundaryInbox.
const (
	BoundaryQueue         = "order → queue (one tx)"
	BoundaryQueueConsumer = "queue (database) → consumer"
)

// DBQueue is implemented by the Broker of --broker db:: there is none, the run's
// database is the queue.
type DBQueue interface {
	DatabaseQueue() bool
}

// QueueStats is what the queue boundary did (--broker db:).
type QueueStats struct {
	// Claims counts the deliveries the consumers claimed; Redeliveries those
	// beyond one per message (the row's "dup delivered").
	Claims       int `json:"claims"`
	Redeliveries int `json:"redeliveries"`
	// Takeovers counts the claims of a message whose previous claim was never
	// settled: its consumer was killed or paused, its lease ran out and another
	// consumer took it.
	Takeovers int `json:"lease_takeovers"`
	// LeaseLost counts the transactions whose retirement found a message no
	// longer theirs (queue.ErrLeaseLost): their effects rolled back.
	LeaseLost int `json:"settles_lease_lost"`
	// Outcomes counts the queue's rows by outcome at the end ("" unfinished).
	Outcomes map[string]int `json:"outcomes"`
	// Lease is the consumers' lease.
	Lease time.Duration `json:"lease_ns"`
}

func (s *QueueStats) write(w io.Writer) {
	var outs []string
	for _, k := range []string{idemsql.QueueApplied, idemsql.QueueDuplicate, idemsql.QueueDead, idemsql.QueueAcked, idemsql.QueueCancelled, ""} {
		if n := s.Outcomes[k]; n > 0 {
			name := k
			if k == "" {
				name = "unfinished"
			}
			outs = append(outs, fmt.Sprintf("%s %d", name, n))
		}
	}
	fmt.Fprintf(w, "note: queue (lease %v): %d claims, %d redeliveries (%d lease takeovers: messages of killed or paused consumers claimed again after their lease), "+
		"%d transactions refused at retirement for a lost lease (their effects rolled back); rows by outcome: %s\n",
		s.Lease, s.Claims, s.Redeliveries, s.Takeovers, s.LeaseLost, strings.Join(outs, ", "))
	fmt.Fprintln(w, "note: no ack_lost fault with the database as the queue: a message is retired in its effect's transaction, there is no separate ack to lose (--unsafe retires after the commit)")
}

// queueLease is the queue consumers' lease: the broker's ack wait, at least
// 2×Flow.Skew.
func (r *run) queueLease() time.Duration { return r.f.skewLease(r.f.Broker.AckWait()) }

// dbQueue reports whether the run's database is its queue.
func (f *Flow) dbQueue() bool {
	q, ok := f.Broker.(DBQueue)
	return ok && q.DatabaseQueue()
}

// queueRun is the state of the database queue of one run.
type queueRun struct {
	q         *queue.Queue[*sql.Tx]
	claims    sync.Map // msg id → *claimState: the last claim of the message
	takeovers atomic.Int64
	leaseLost atomic.Int64
	pausing   atomic.Bool // one consumer paused at a time: another must take over
}

// claimState is one claim of a message: settled once its consumer acked or
// naked it.
type claimState struct{ settled atomic.Bool }

func (r *run) newQueue(ctx context.Context) error {
	q, err := queue.New(ctx, r.txdb, queue.Config{Logger: r.log})
	if err != nil {
		return err
	}
	r.queue = &queueRun{q: q}
	return nil
}

// superviseDBConsumer runs one consumer process on the database queue until ctx
// ends, restarted after each crash. A killed process's Source is halted, not
// closed: its leases run out as a crashed process's would.
func (r *run) superviseDBConsumer(ctx context.Context) {
	// Min 1: a run kills (and pauses) at every point at least once, whatever
	// the draw: a batch is hit at a quarter of the rate, so a short run has few.
	batch := []chaos.Fault{{Kind: chaos.FaultCrashBeforeEffect, Weight: 1, Min: 1}, {Kind: chaos.FaultCrashAfterEffect, Weight: 1, Min: 1},
		{Kind: chaos.FaultCrashAfterCommit, Weight: 1, Min: 1}}
	if r.f.Consumers > 1 {
		// As likely as a kill (each costs a lease and a takeover), at most 3.
		batch = append(batch, chaos.Fault{Kind: chaos.FaultPaused, Weight: 1, Min: 1, Max: 3})
	}
	// With Flow.Skew the consumer's node has a queue of its own on its clock
	// (run-at times and leases are the queue's Config.Now).
	_, now := r.consumerClock()
	q := r.queue.q
	for now != nil && q == r.queue.q && ctx.Err() == nil {
		qq, err := queue.New(ctx, r.txdb, queue.Config{Logger: r.log, Now: now})
		if err != nil {
			r.log.Warn("verify: open the consumer's queue", "err", err)
			wait.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		q = qq
	}
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			r.restarts.Add(1)
		}
		cctx, kill := context.WithCancel(ctx)
		qs, err := q.Source(queue.SourceConfig{Topic: r.f.Broker.Topic(), Lease: r.queueLease(), PollInterval: 50 * time.Millisecond})
		if err != nil {
			r.log.Warn("verify: open the queue's source", "err", err)
			kill()
			wait.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		ds := &dbSource{r: r, qs: qs, batch: batch}
		ds.kill = func() { ds.dead.Store(true); kill() }
		var src idem.Source = ds
		if r.f.Unsafe {
			// The plain at-least-once queue: retired after the commit (the inbox
			// sees no TxSource, so it acks), no keys (noDedup).
			src = plainSource{ds}
		}
		c, err := inbox.New(cctx, src, r.txdb, r.store, chaos.Handler(r.ledger, 0, ds.kill), r.inboxConfig(now))
		if err == nil {
			err = c.Run(cctx)
		}
		killed := ctx.Err() == nil
		kill()
		if killed {
			qs.Halt() // a crash: nothing put back, the leases run out
		} else {
			_ = qs.Close()
		}
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, idem.ErrClosed) {
			r.log.Warn("verify: consumer stopped", "err", err)
			r.noteStop()
			wait.Sleep(ctx, 50*time.Millisecond)
		}
	}
}

// dbSource is a consumer's queue Source with the faults of the queue →
// consumer boundary: a batch fault per claim (killed before the effect, before
// the commit, after it; paused past the lease). It is an inbox.TxSource: the
// inbox retires its messages in the effect's transaction.
type dbSource struct {
	r     *run
	qs    *queue.Source[*sql.Tx]
	batch []chaos.Fault
	kill  func()      // a crash: the consumer's context ends, and dead is set
	dead  atomic.Bool // killed: what the process would do after it does not reach the database
}

func (s *dbSource) Receive(ctx context.Context, limit int) ([]idem.Delivery, error) {
	ds, err := s.qs.Receive(ctx, limit)
	if err != nil || len(ds) == 0 {
		return ds, err
	}
	qr := s.r.queue
	for i := range ds {
		s.r.delivered.Add(ds[i].ID)
		st := &claimState{}
		if prev, ok := qr.claims.Swap(ds[i].ID, st); ok && !prev.(*claimState).settled.Load() {
			qr.takeovers.Add(1)
		}
		ds[i].Settler = &dbSettler{inner: ds[i].Settler, st: st, src: s}
	}
	at := int(fnv64(ds[0].ID) % uint64(len(ds)))
	// A batch fault per claim at twice the fault rate: a database queue has no
	// faults of single deliveries (no duplicate deliveries, no acks to lose), so
	// its claims carry the boundary's faults, and a short run gets each kind.
	switch fault := s.r.inj.RollScaled("process "+ds[0].ID, ds[0].Attempt, 2, s.batch); fault {
	case "":
	case chaos.FaultCrashAfterCommit:
		ds[at].Settler.(*dbSettler).kill = s.kill
	case chaos.FaultPaused:
		if !s.pause(ctx, ds[at]) {
			s.r.inj.Cancel(fault)
		}
	default:
		ds[at] = markFault(ds[at], fault)
	}
	return ds, nil
}

// pause stalls the consumer with the batch it claimed, its Source's renewals
// stopped too, as a paused process stalls, until another consumer has claimed
// d (its row's attempts grew) or finished it, bounded by two minutes; then it
// goes on, and the retirement of its effect must fail (the lease is lost) and
// roll the effect back. It pauses before the batch's transaction: a transaction
// held open would hold the locks (SQLite's one writer, the balance row) that
// the consumer taking over needs. It reports false when it did not pause
// (another consumer is paused: one must be left to take over).
func (s *dbSource) pause(ctx context.Context, d idem.Delivery) bool {
	qr := s.r.queue
	if !qr.pausing.CompareAndSwap(false, true) {
		return false
	}
	defer qr.pausing.Store(false)
	row, err := strconv.ParseInt(strings.TrimPrefix(d.Position, "queue row "), 10, 64)
	if err != nil {
		return false
	}
	resume := s.qs.PauseRenewals()
	defer resume()
	bound := time.Now().Add(2 * time.Minute)
	for ctx.Err() == nil && time.Now().Before(bound) {
		var attempts int
		var finished bool
		err := s.r.txdb.Auto(ctx, func(q idemsql.Querier) error {
			return q.QueryRow(ctx, "SELECT attempts, finished_at IS NOT NULL FROM idem_queue WHERE id = $1", row).Scan(&attempts, &finished)
		})
		if err == nil && (attempts > d.Attempt || finished) {
			return true
		}
		wait.Sleep(ctx, 50*time.Millisecond)
	}
	if ctx.Err() == nil {
		s.r.log.Warn("verify: a paused consumer's message was not taken over within 2 minutes; going on", "id", d.ID)
	}
	return true
}

func (s *dbSource) Close() error { return nil } // the supervisor halts or closes qs

// Database and SettleTx make dbSource an inbox.TxSource.
func (s *dbSource) Database() idemsql.TxDB[*sql.Tx] { return s.qs.Database() }

func (s *dbSource) SettleTx(ctx context.Context, tx *sql.Tx, ds []idem.Delivery, outcomes []string) error {
	inner := make([]idem.Delivery, len(ds))
	for i, d := range ds {
		if w, ok := d.Settler.(*dbSettler); ok {
			d.Settler = w.inner
		}
		inner[i] = d
	}
	err := s.qs.SettleTx(ctx, tx, inner, outcomes)
	if errors.Is(err, queue.ErrLeaseLost) {
		s.r.queue.leaseLost.Add(1)
	}
	return err
}

// plainSource hides dbSource's TxSource: the inbox acks after the commit.
type plainSource struct{ s *dbSource }

func (p plainSource) Receive(ctx context.Context, limit int) ([]idem.Delivery, error) {
	return p.s.Receive(ctx, limit)
}
func (p plainSource) Close() error { return p.s.Close() }

// dbSettler settles one claim, recording that it was settled; with kill set
// (chaos.FaultCrashAfterCommit) the consumer dies instead of acking. A killed
// consumer settles nothing: its process is gone, its leases run out.
type dbSettler struct {
	inner idem.Settler
	st    *claimState
	src   *dbSource
	kill  func()
}

// errKilled is a settle of a killed consumer: it never reaches the database.
var errKilled = errors.New("verify: the consumer was killed")

func (d *dbSettler) Ack(ctx context.Context) error {
	if d.kill != nil {
		d.kill()
	}
	if d.src.dead.Load() {
		return errKilled
	}
	err := d.inner.Ack(ctx)
	if err == nil {
		d.st.settled.Store(true)
	}
	return err
}

func (d *dbSettler) Nak(ctx context.Context, delay time.Duration) error {
	if d.src.dead.Load() {
		return errKilled
	}
	err := d.inner.Nak(ctx, delay)
	if err == nil {
		d.st.settled.Store(true)
	}
	return err
}

// markFault sets chaos.HeaderFault on a copy of d's headers, for chaos.Handler.
func markFault(d idem.Delivery, fault string) idem.Delivery {
	h := make(map[string]string, len(d.Headers)+1)
	for k, v := range d.Headers {
		h[k] = v
	}
	h[chaos.HeaderFault] = fault
	d.Headers = h
	return d
}

// checkQueue builds the queue's row (one message per order, enqueued in the
// order's transaction) and the queue's figures.
func (r *run) checkQueue(ctx context.Context, orders orderSet) (Row, *QueueStats, error) {
	rows := map[string]int{}
	st := &QueueStats{Outcomes: map[string]int{}, Lease: r.queueLease()}
	if err := r.query(ctx, "the queue", "SELECT msg_id, outcome FROM idem_queue WHERE topic = '"+r.f.Broker.Topic()+"'", func(scan func(...any) error) error {
		var id, out string
		if err := scan(&id, &out); err != nil {
			return err
		}
		rows[id]++
		st.Outcomes[out]++
		return nil
	}); err != nil {
		return Row{}, nil, err
	}
	row := Row{Boundary: BoundaryQueue, Attempts: len(orders.amount)}
	for id, n := range rows {
		if _, ok := orders.amount[id]; !ok {
			row.DuplicatedEffects += n // a message without its order: a torn transaction
			continue
		}
		row.EffectsApplied += n
		row.DuplicatedEffects += n - 1
	}
	for id := range orders.amount {
		if rows[id] == 0 {
			row.Lost++
		}
	}
	qr := r.queue
	st.Claims, st.Redeliveries = r.delivered.Total(), r.delivered.Total()-r.delivered.Distinct()
	st.Takeovers, st.LeaseLost = int(qr.takeovers.Load()), int(qr.leaseLost.Load())
	return row, st, nil
}
