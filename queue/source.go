package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
)

// Notifier wakes a Source when messages were committed: idempg.NewNotifier(pool,
// idemsql.QueueNotifyChannel) listens for the NOTIFY InsertTx sends on
// PostgreSQL. Wait returns when a notification arrives, or with an error when
// the listening connection failed (the Source then polls and calls Wait again).
// A Notifier that also has Listen(ctx) error (as idempg.Notifier does), listening
// at once, is listened to again with it after a failure, and the Source claims as
// soon as it listens again: what committed while nobody listened notified nobody.
type Notifier interface {
	Wait(ctx context.Context) error
}

// SourceConfig configures a Source. Only Topic is required.
type SourceConfig struct {
	// Topic is the topic whose messages the Source claims. Every Source of a
	// topic, in any process, shares its messages: each runs once.
	Topic string
	// Worker names this Source in the rows it leases (leased_by), for the
	// operator's view. Default host:pid:random.
	Worker string
	// Lease is how long a claimed message is this Source's: past it, another
	// Source may claim it again (its attempt counts), and this one can no longer
	// retire it, so its effect cannot commit. The Source renews the leases of
	// the messages it handed out and not yet settled every Lease/3, so a slow
	// handler keeps its message while its process lives; a process that stops
	// (killed, paused, cut off) loses them after Lease. Default 30 s.
	Lease time.Duration
	// PollInterval is the longest a Source waits without being woken. After a
	// wake, or a claim that found messages, it polls every MinPollInterval for
	// a while, then waits longer and longer up to PollInterval. Default 1 s;
	// MinPollInterval default 2 ms.
	PollInterval    time.Duration
	MinPollInterval time.Duration
	// Notifier wakes the Source at commit (PostgreSQL: idempg.NewNotifier with
	// idemsql.QueueNotifyChannel). Without it the Source polls, and is woken by
	// InsertTx of its own Queue in this process.
	Notifier Notifier
	// Prefetch claims the next batch while the one Receive returned is being
	// processed: as soon as a Receive returns messages, the Source claims up to
	// as many again in the background, and the next Receive returns them
	// without a round trip. A claim that finds nothing does not chain, so an
	// idle Source claims only when Receive is called. The prefetched messages
	// are this Source's like the ones handed out (leased, renewed, put back at
	// Close), and their ordering keys wait for them; their attempt counts
	// from the prefetch. Off by default.
	Prefetch bool
}

const (
	// DefaultLease is SourceConfig.Lease's default.
	DefaultLease = 30 * time.Second
	// MinLease bounds SourceConfig.Lease from below: a lease must outlast a
	// claim's round trip and a renewal's.
	MinLease = 100 * time.Millisecond
	// DefaultPollInterval and DefaultMinPollInterval are SourceConfig's.
	DefaultPollInterval    = time.Second
	DefaultMinPollInterval = 2 * time.Millisecond
	// quickPolls is how many polls at MinPollInterval follow a wake or a claim
	// that found messages.
	quickPolls = 50
	// maxPairs bounds the (id, attempts) pairs of one Retire or Extend statement
	// where the database takes no arrays.
	maxPairs = 500
)

// ErrLeaseLost is returned by a delivery's settle, and by SettleTx (so the
// consumer's transaction rolls back), when the message is no longer this
// Source's: its lease ran out and another Source claimed it, or it was
// cancelled, or a settle of it committed already. It is idem.ErrLeaseLost.
var ErrLeaseLost = idem.ErrLeaseLost

// Source claims the messages of one topic from a Queue's table: an idem.Source
// for package inbox, and an inbox.TxSource, so an inbox consumer on the same
// database retires each message in the transaction of its effect. Create it
// with Queue.Source; Close it when done.
type Source[Tx any] struct {
	q   *Queue[Tx]
	cfg SourceConfig

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wake   chan struct{} // from the Notifier's loop
	loops  sync.WaitGroup

	mu   sync.Mutex
	held map[int64]*settler[Tx] // handed out or prefetched, not yet settled: their leases are renewed
	pre  chan prefetched        // the outstanding prefetch (SourceConfig.Prefetch), nil when none

	paused atomic.Int32 // PauseRenewals calls not yet resumed: renew skips its rounds
	quick  atomic.Int32 // polls left at MinPollInterval, after a wake or a claim that found messages
}

// prefetched is what a prefetch claimed.
type prefetched struct {
	ds  []idem.Delivery
	err error
}

// Source returns a Source of cfg.Topic. It starts renewing leases and, with a
// Notifier, listening; Close stops both.
func (q *Queue[Tx]) Source(cfg SourceConfig) (*Source[Tx], error) {
	var ie *idem.InputError
	if err := cmp.Or((idem.Message{ID: "x", Topic: cfg.Topic}).Validate(), fitsColumns(idem.Message{Topic: cfg.Topic})); errors.As(err, &ie) {
		return nil, &idem.InputError{Field: "SourceConfig.Topic", Reason: ie.Reason, Fix: "name the topic the producers enqueue to"}
	}
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.MinPollInterval = cmp.Or(cfg.MinPollInterval, DefaultMinPollInterval)
	if cfg.Worker == "" {
		host, _ := os.Hostname()
		cfg.Worker = host + ":" + strconv.Itoa(os.Getpid()) + ":" + idemkey.NewULID()[20:]
	}
	switch {
	case cfg.Lease < MinLease:
		return nil, &idem.InputError{Field: "SourceConfig.Lease", Reason: fmt.Sprintf("is %v, below %v", cfg.Lease, MinLease),
			Fix: "leave it 0 for the default of 30 s; it bounds how long a stopped process keeps its messages"}
	case cfg.PollInterval < 0 || cfg.MinPollInterval < 0 || cfg.MinPollInterval > cfg.PollInterval:
		return nil, &idem.InputError{Field: "SourceConfig.PollInterval", Reason: fmt.Sprintf("%v with MinPollInterval %v", cfg.PollInterval, cfg.MinPollInterval),
			Fix: "leave both 0 for 1 s and 2 ms, or keep 0 < MinPollInterval <= PollInterval"}
	case len(cfg.Worker) > 255:
		return nil, &idem.InputError{Field: "SourceConfig.Worker", Reason: "is longer than 255 bytes", Fix: "use a short name, such as host:pid"}
	}
	s := &Source[Tx]{q: q, cfg: cfg, wake: make(chan struct{}, 1), held: map[int64]*settler[Tx]{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.loops.Go(s.renew)
	if cfg.Notifier != nil {
		s.loops.Go(s.listen)
	}
	return s, nil
}

// Database is the database the Source's messages live in (inbox.TxSource).
func (s *Source[Tx]) Database() idemsql.TxDB[Tx] { return s.q.db }

// Features: a database queue keeps one ordering key's messages in order, honours
// a Nak's delay, and counts attempts; it has no dedup of its own beyond
// refusing a second unfinished copy (the inbox's keys drop the rest).
func (s *Source[Tx]) Features() idem.Features {
	return idem.Features{OrderedPerKey: true, DelayedNak: true, Attempts: true}
}

// Receive claims up to max due messages of the topic, waiting until there are
// some, ctx ends, or the Source is closed (idem.ErrClosed).
func (s *Source[Tx]) Receive(ctx context.Context, limit int) ([]idem.Delivery, error) {
	limit = min(max(limit, 1), inbox.MaxBatchSize)
	if ds, ok, err := s.takePrefetched(ctx); ok {
		if err == nil {
			s.prefetch(limit)
		}
		return ds, err
	}
	idle := s.cfg.MinPollInterval
	for {
		if s.ctx.Err() != nil {
			return nil, idem.ErrClosed
		}
		kick := s.q.woken()
		ds, err := s.claim(ctx, limit)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if len(ds) > 0 {
			// More may follow (the next of an ordering key is due once this
			// one is retired): the next Receive polls quickly for a while.
			s.quick.Store(quickPolls)
			s.prefetch(limit)
			return ds, nil
		}
		var d time.Duration
		if s.quick.Load() > 0 {
			s.quick.Add(-1)
			d = s.cfg.MinPollInterval
		} else {
			idle = min(idle*2, s.cfg.PollInterval)
			d = idle
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-s.ctx.Done():
			t.Stop()
			return nil, idem.ErrClosed
		case <-kick:
			s.quick.Store(quickPolls)
			idle = s.cfg.MinPollInterval
		case <-s.wake:
			s.quick.Store(quickPolls)
			idle = s.cfg.MinPollInterval
		case <-t.C:
		}
		t.Stop()
	}
}

// takePrefetched waits for the outstanding prefetch, if any, and reports
// whether Receive is to return what it brought: messages, or ctx's end (the
// prefetch stays outstanding for the next Receive). A prefetch that found
// nothing or failed leaves Receive to claim as usual.
func (s *Source[Tx]) takePrefetched(ctx context.Context) ([]idem.Delivery, bool, error) {
	s.mu.Lock()
	pre := s.pre
	s.pre = nil
	s.mu.Unlock()
	if pre == nil {
		return nil, false, nil
	}
	select {
	case r := <-pre:
		return r.ds, r.err == nil && len(r.ds) > 0, nil
	case <-ctx.Done():
		s.mu.Lock()
		if s.pre == nil {
			s.pre = pre
		}
		s.mu.Unlock()
		return nil, true, ctx.Err()
	case <-s.ctx.Done():
		return nil, true, idem.ErrClosed
	}
}

// prefetch starts claiming up to limit messages in the background
// (SourceConfig.Prefetch) unless a prefetch is outstanding or the Source is
// closed. Close waits for it, and puts back what it claimed.
func (s *Source[Tx]) prefetch(limit int) {
	if !s.cfg.Prefetch {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pre != nil || s.ctx.Err() != nil {
		return
	}
	ch := make(chan prefetched, 1)
	s.pre = ch
	s.loops.Go(func() {
		// Not cut by Close: a claim whose UPDATE committed while its answer was
		// being read would leave its rows leased and held by no one until their
		// lease ran out. Close waits for it and puts back what it claimed.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), s.cfg.Lease)
		defer cancel()
		ds, err := s.claim(ctx, limit)
		ch <- prefetched{ds, err}
	})
}

// claim leases up to max due messages and returns them as deliveries, parking
// (finishing as dead, with the reason) those whose row cannot be delivered.
func (s *Source[Tx]) claim(ctx context.Context, limit int) ([]idem.Delivery, error) {
	now := s.q.cfg.Now()
	until := now.Add(s.cfg.Lease).UnixMilli()
	st := s.q.stmts
	var rows []claimed
	var err error
	if st.ClaimLock != "" {
		err = s.q.db.InTxReadCommitted(ctx, func(tx Tx) error {
			rows, err = readClaimed(ctx, s.q.db.Querier(tx), st.ClaimLock, now.UnixMilli(), s.cfg.Topic, limit)
			if err != nil || len(rows) == 0 {
				return err
			}
			args := []any{until, s.cfg.Worker}
			for _, r := range rows {
				args = append(args, r.id)
			}
			_, err := s.q.db.Querier(tx).Exec(ctx, st.ClaimMark(len(rows)), args...)
			return err
		})
	} else {
		err = s.q.db.Auto(ctx, func(qr idemsql.Querier) error {
			rows, err = readClaimed(ctx, qr, st.Claim, now.UnixMilli(), until, s.cfg.Worker, s.cfg.Topic, limit)
			return err
		})
	}
	if err != nil {
		return nil, &idem.BackendError{Backend: s.q.db.Dialect().String(), Op: "queue.claim", Err: err}
	}
	slices.SortFunc(rows, func(a, b claimed) int { return cmp.Compare(a.id, b.id) })
	ds := make([]idem.Delivery, 0, len(rows))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		st := &settler[Tx]{s: s, id: r.id, attempts: r.attempts}
		d, bad := r.delivery(s.cfg.Topic)
		if bad != "" {
			go st.park(bad) // off the claim's path; the lease covers it meanwhile
			continue
		}
		d.Settler = st
		s.held[r.id] = st
		ds = append(ds, d)
	}
	s.q.m.Claimed(s.cfg.Topic, len(rows))
	return ds, nil
}

// claimed is one row a claim leased, as read.
type claimed struct {
	id                 int64
	attempts           int
	created            int64
	msgID, orderingKey string
	headers            *string
	headersLen         int64
	payload            []byte
	payloadLen         int64
	payloadNull        bool
}

func readClaimed(ctx context.Context, qr idemsql.Querier, query string, args ...any) ([]claimed, error) {
	rs, err := qr.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []claimed
	for rs.Next() {
		var c claimed
		var payload *[]byte
		if err := rs.Scan(&c.id, &c.attempts, &c.created, &c.msgID, &c.orderingKey, &c.headers, &c.headersLen, &payload, &c.payloadLen); err != nil {
			return nil, err
		}
		if payload != nil {
			c.payload = *payload
		} else {
			c.payloadNull = true
		}
		out = append(out, c)
	}
	return out, rs.Err()
}

// delivery decodes r, or says why it cannot be delivered.
func (r claimed) delivery(topic string) (idem.Delivery, string) {
	d := idem.Delivery{Message: idem.Message{ID: r.msgID, Topic: topic, OrderingKey: r.orderingKey, Payload: r.payload},
		Attempt: r.attempts, Position: "queue row " + strconv.FormatInt(r.id, 10)}
	switch {
	case r.payloadNull:
		return d, fmt.Sprintf("payload is %d bytes, above idem.MaxPayload (%d): store large bodies elsewhere and enqueue a reference", r.payloadLen, idem.MaxPayload)
	case r.headers == nil:
		return d, fmt.Sprintf("headers are %d bytes, above %d", r.headersLen, idemsql.OutboxMaxHeadersBytes)
	}
	if *r.headers != "" && *r.headers != "{}" && *r.headers != "null" {
		if err := json.Unmarshal([]byte(*r.headers), &d.Headers); err != nil {
			return d, fmt.Sprintf("headers are not a JSON object of strings (%v): the row was not written by queue.InsertTx; write headers as {\"name\": \"value\"}", err)
		}
	}
	if d.Payload == nil {
		d.Payload = []byte{}
	}
	return d, ""
}

// renew extends the leases of the deliveries handed out and not yet settled,
// every Lease/3, until Close.
func (s *Source[Tx]) renew() {
	t := time.NewTicker(s.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if s.paused.Load() > 0 {
			continue
		}
		s.mu.Lock()
		held := make([]*settler[Tx], 0, len(s.held))
		for _, st := range s.held {
			held = append(held, st)
		}
		s.mu.Unlock()
		if len(held) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Lease/3)
		until := s.q.cfg.Now().Add(s.cfg.Lease).UnixMilli()
		err := s.q.db.Auto(ctx, func(qr idemsql.Querier) error {
			return s.eachPairs(held, func(ids []int64, atts []int32, pairs []any, n int) error {
				var err error
				if s.q.stmts.ExtendArrays != "" {
					_, err = qr.Exec(ctx, s.q.stmts.ExtendArrays, until, ids, atts)
				} else {
					_, err = qr.Exec(ctx, s.q.stmts.Extend(n), append([]any{until}, pairs...)...)
				}
				return err
			})
		})
		cancel()
		if err != nil && s.ctx.Err() == nil {
			s.q.cfg.Logger.Warn("queue: renewing leases failed; they may run out and the messages run again elsewhere",
				"topic", s.cfg.Topic, "held", len(held), "err", err)
		}
	}
}

// eachPairs calls fn with held's (id, attempts) pairs, in chunks a statement
// takes: as arrays, and as flat arguments.
func (s *Source[Tx]) eachPairs(held []*settler[Tx], fn func(ids []int64, atts []int32, pairs []any, n int) error) error {
	for len(held) > 0 {
		n := min(len(held), maxPairs)
		ids, atts, pairs := make([]int64, n), make([]int32, n), make([]any, 0, 2*n)
		for i, st := range held[:n] {
			ids[i], atts[i] = st.id, int32(st.attempts)
			pairs = append(pairs, st.id, st.attempts)
		}
		if err := fn(ids, atts, pairs, n); err != nil {
			return err
		}
		held = held[n:]
	}
	return nil
}

// listen turns the Notifier's notifications into wakes until Close. After a
// failure it listens again before waiting (with a Notifier that can), and wakes
// Receive once it does: a commit while the connection was down sent a NOTIFY
// nobody heard, and would otherwise wait for the next poll, up to PollInterval.
func (s *Source[Tx]) listen() {
	l, canListen := s.cfg.Notifier.(interface{ Listen(context.Context) error })
	woken := func() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	failures := 0
	for s.ctx.Err() == nil {
		var err error
		relisten := failures > 0 && canListen
		if relisten {
			err = l.Listen(s.ctx)
		} else {
			err = s.cfg.Notifier.Wait(s.ctx)
		}
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			var ie *idem.InputError
			if errors.As(err, &ie) {
				s.q.cfg.Logger.Warn("queue: the notifier cannot listen; polling only", "topic", s.cfg.Topic, "err", err)
				return
			}
			failures++
			woken() // poll meanwhile: a wake makes Receive look at once
			d := min(time.Duration(failures)*100*time.Millisecond, 5*time.Second)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		failures = 0
		woken() // a notification, or listening again: claim what committed meanwhile
	}
}

// Close stops the Source: Receive returns idem.ErrClosed, and the messages it
// handed out and that were not settled are put back at once, for another Source
// to claim (their attempt counted).
func (s *Source[Tx]) Close() error {
	if s.ctx.Err() != nil {
		return nil
	}
	s.mu.Lock() // no prefetch starts after this (prefetch checks s.ctx under mu)
	s.cancel()
	s.mu.Unlock()
	s.loops.Wait()
	s.mu.Lock()
	held := make([]*settler[Tx], 0, len(s.held))
	for _, st := range s.held {
		held = append(held, st)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, st := range held {
		_ = st.Nak(ctx, 0)
	}
	return nil
}

// Halt stops the Source as a process that dies stops: Receive returns
// idem.ErrClosed and the leases are no longer renewed, but the messages it
// holds are not put back: other Sources claim them once their leases run out,
// and a settle of them fails with ErrLeaseLost from then on. It is for fault
// injection (idem verify's killed consumers, tests); a process that stops on
// purpose calls Close, which puts them back at once. Close after Halt does
// nothing.
func (s *Source[Tx]) Halt() {
	s.mu.Lock() // no prefetch starts after this (prefetch checks s.ctx under mu)
	s.cancel()
	s.mu.Unlock()
	s.loops.Wait()
}

// PauseRenewals stops renewing the Source's leases until resume is called, as
// a paused process (stopped, swapped out, frozen in a long GC) stops renewing
// them: past their leases, other Sources claim its messages, and its settles
// of them fail with ErrLeaseLost. It is for fault injection (idem verify's
// consumers paused past their lease, tests). resume may be called more than
// once; the renewals start again at the next round (every Lease/3).
func (s *Source[Tx]) PauseRenewals() (resume func()) {
	s.paused.Add(1)
	var once sync.Once
	return func() { once.Do(func() { s.paused.Add(-1) }) }
}

// Lag counts the topic's unfinished messages (idem.LagReporter).
func (s *Source[Tx]) Lag(ctx context.Context) (idem.Lag, error) {
	var n int64
	err := s.q.db.Auto(ctx, func(qr idemsql.Querier) error {
		return qr.QueryRow(ctx, s.q.stmts.Lag, s.cfg.Topic).Scan(&n)
	})
	if err != nil {
		return idem.Lag{}, &idem.BackendError{Backend: s.q.db.Dialect().String(), Op: "queue.lag", Err: err}
	}
	return idem.Lag{Messages: n}, nil
}

// SettleTx retires ds in tx with their outcomes (inbox.TxSource): each is
// finished if and only if tx commits. It fails with ErrLeaseLost, which rolls
// tx back, when one of them is no longer this Source's.
func (s *Source[Tx]) SettleTx(ctx context.Context, tx Tx, ds []idem.Delivery, outcomes []string) error {
	by := map[string][]*settler[Tx]{}
	var order []string
	for i, d := range ds {
		st, ok := d.Settler.(*settler[Tx])
		if !ok || st.s != s {
			return &idem.InputError{Field: "ds", Reason: fmt.Sprintf("delivery %d was not received from this Source", i), Fix: "settle a delivery with the Source that received it"}
		}
		if _, seen := by[outcomes[i]]; !seen {
			order = append(order, outcomes[i])
		}
		by[outcomes[i]] = append(by[outcomes[i]], st)
	}
	now := s.q.cfg.Now().UnixMilli()
	qr := s.q.db.Querier(tx)
	for _, out := range order {
		group := by[out]
		var done int64
		err := s.eachPairs(group, func(ids []int64, atts []int32, pairs []any, n int) error {
			var k int64
			var err error
			if s.q.stmts.RetireArrays != "" {
				k, err = qr.Exec(ctx, s.q.stmts.RetireArrays, now, out, ids, atts)
			} else {
				k, err = qr.Exec(ctx, s.q.stmts.Retire(n), append([]any{now, out}, pairs...)...)
			}
			done += k
			return err
		})
		if err != nil {
			return &idem.BackendError{Backend: s.q.db.Dialect().String(), Op: "queue.retire", Err: err}
		}
		if done != int64(len(group)) {
			s.q.m.Settled(s.cfg.Topic, settledLeaseLost, len(group)-int(done))
			return fmt.Errorf("queue: %d of %d messages of topic %s are no longer this consumer's to retire (lease ran out and another consumer took them, or cancelled): %w",
				int64(len(group))-done, len(group), s.cfg.Topic, ErrLeaseLost)
		}
	}
	for out, group := range by {
		for _, st := range group {
			st.mu.Lock()
			st.inTx, st.outcome = true, out
			st.mu.Unlock()
		}
	}
	return nil
}

// forget stops renewing st's lease.
func (s *Source[Tx]) forget(st *settler[Tx]) {
	s.mu.Lock()
	if s.held[st.id] == st {
		delete(s.held, st.id)
	}
	s.mu.Unlock()
}
