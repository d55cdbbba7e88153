package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/wait"
)

// Relay publishes the outbox from PostgreSQL's write-ahead log to a Sink.
type Relay struct {
	url  string
	sink idem.Sink
	cfg  Config
	m    *relayMetrics

	// afterPublish, when set (tests), runs after the broker acknowledged a batch and
	// before the relay confirms it: the kill point of the proofs.
	afterPublish func()

	prog progress
	// Sessions run one at a time (Run), so these need no lock. attempts counts the
	// failed publications in a row of the messages at the front; parked holds the
	// messages parked and not yet confirmed, which a new session reads again.
	attempts map[position]int
	parked   map[position]bool
	ignored  ignored
}

// New returns a relay of the outbox of the database at url (postgres://…) to sink.
// It connects only when Run, Setup, Status or DropSlot is called.
func New(url string, sink idem.Sink, cfg Config) (*Relay, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, &idem.InputError{Field: "sink", Reason: "is nil", Fix: "pass a broker Sink (idemnats, idemkafka, idemredis, idemamqp)"}
	}
	if _, err := pgconn.ParseConfig(url); err != nil {
		return nil, &idem.InputError{Field: "url", Reason: "is not a PostgreSQL connection string", Fix: "use postgres://user@host:5432/db"}
	}
	r := &Relay{url: url, sink: sink, cfg: cfg, attempts: map[position]int{}, parked: map[position]bool{}}
	if r.m, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	return r, nil
}

// Setup checks the server (wal_level, the role's replication privilege, the
// publication, the role's right to park messages in the outbox table and, with
// Config.Messages, who may write WAL messages) and creates the publication and the
// slot when missing, without reading: what Run does first, for deploy scripts and
// `idem relay --cdc`, which fails fast on it.
func (r *Relay) Setup(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		return backendErr("setup", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := r.check(ctx, conn); err != nil {
		return err
	}
	if err := r.checkPublication(ctx, conn); err != nil {
		return err
	}
	if err := r.checkWriters(ctx, conn); err != nil {
		return err
	}
	schema, _, err := r.qualified(ctx, conn)
	if err != nil {
		return backendErr("setup", err)
	}
	loss, st, err := r.detectLoss(ctx, conn, schema)
	if err != nil {
		return err
	}
	if loss != nil {
		// Creating the slot here would hide the loss: Run recovers it, under the lock.
		if r.cfg.RefuseSlotLoss || r.cfg.SkipMarkPublished {
			_, err := r.recoverSlot(ctx, &stream{r: r, ctl: conn, schema: schema}, "", loss)
			return err
		}
		r.cfg.Logger.WarnContext(ctx, "cdc relay: replication slot lost; Run re-creates it and publishes the outbox rows committed meanwhile",
			"slot", r.cfg.Slot, "why", loss.why, "gap_from", FormatLSN(st.confirmed))
		return nil
	}
	slot, err := r.ensureSlot(ctx, conn)
	if err != nil {
		return err
	}
	_, err = r.recordSlot(ctx, conn, schema, st, slot.start())
	return err
}

// Run relays until ctx ends and returns ctx's error, or a *SetupError when the
// server is not set up for it (wal_level, privileges, publication, WAL messages
// writable by roles without privilege on the outbox, a slot read by a process
// outside idem's lock for longer than a minute).
//
// A message that cannot be published (undecodable, refused by the sink as invalid,
// or failing Config.MaxAttempts times while messages after it go through) is parked
// in the outbox table with its reason (outbox.ParkTx) and the relay goes on: the
// slot moves past it. Health reports what waits.
//
// Several relays may run on one slot: one reads, the others wait as standbys on an
// advisory lock and take over within Config.LockRetry of its connection ending.
// A failed session (broker down, connection lost) is retried with backoff, streaming
// again from the slot's confirmed position: what the broker acknowledged is never
// published again by the same slot, and what it did not is published again.
func (r *Relay) Run(ctx context.Context) error {
	failures := 0
	var takenSince time.Time
	for {
		progressed, err := r.session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if progressed {
			failures = 0
		}
		var se *SetupError
		if errors.As(err, &se) {
			// A slot marked active right after a failover is usually the previous
			// reader's server process, not yet ended: wait a little for it.
			if !errors.Is(err, ErrSlotTaken) {
				return err
			}
			if takenSince.IsZero() {
				takenSince = time.Now()
			} else if time.Since(takenSince) > time.Minute {
				return err
			}
		} else {
			takenSince = time.Time{}
		}
		failures++
		r.prog.failed(time.Now(), err)
		r.cfg.Logger.WarnContext(ctx, "cdc relay: session ended; streaming again from the confirmed position", "err", err, "consecutive", failures)
		if !wait.Sleep(ctx, min(100*time.Millisecond<<min(failures-1, 7), 10*time.Second)) {
			return ctx.Err()
		}
	}
}

// session takes the slot's lock, then streams until an error or ctx's end. It
// reports whether the broker acknowledged anything, which resets Run's backoff.
func (r *Relay) session(ctx context.Context) (progressed bool, err error) {
	s, err := r.open(ctx)
	if err != nil {
		return false, err
	}
	defer s.close(ctx)
	if err := s.start(ctx); err != nil {
		return false, err
	}
	r.prog.streaming()
	err = s.run(ctx)
	return s.flushed > 0, err
}

// open connects, checks, takes the lock and the slot: the stream, ready to start.
func (r *Relay) open(ctx context.Context) (_ *stream, err error) {
	ctl, err := pgx.Connect(ctx, r.url)
	if err != nil {
		return nil, backendErr("connect", err)
	}
	s := &stream{r: r, ctl: ctl, rels: map[uint32]*relation{}}
	defer func() {
		if err != nil {
			s.close(ctx)
		}
	}()
	if err := r.check(ctx, ctl); err != nil {
		return nil, err
	}
	if err := r.lock(ctx, ctl); err != nil {
		return nil, err
	}
	if err := r.checkPublication(ctx, ctl); err != nil {
		return nil, err
	}
	if err := r.checkWriters(ctx, ctl); err != nil {
		return nil, err
	}
	base := r.cfg.Source
	if base == "" {
		var db string
		if err := ctl.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
			return nil, backendErr("connect", err)
		}
		base = db + "/" + r.cfg.Slot
	}
	if s.schema, s.table, err = r.qualified(ctx, ctl); err != nil {
		return nil, backendErr("connect", err)
	}
	// A slot the relay had and lost is re-created here, and the outbox rows
	// committed meanwhile published, before streaming (slotloss.go).
	loss, st, err := r.detectLoss(ctx, ctl, s.schema)
	if err != nil {
		return nil, err
	}
	epoch := st.epoch
	if loss != nil {
		if epoch, err = r.recoverSlot(ctx, s, base, loss); err != nil {
			return nil, err
		}
	}
	slot, err := r.ensureSlot(ctx, ctl)
	if err != nil {
		return nil, err
	}
	if slot.confirmed != nil {
		if s.confirmed, err = parseLSN(*slot.confirmed); err != nil {
			return nil, err
		}
	}
	if loss == nil {
		if epoch, err = r.recordSlot(ctx, ctl, s.schema, st, slot.start()); err != nil {
			return nil, err
		}
	}
	s.source, s.recorded = epochSource(base, epoch), st.confirmed
	if err := ctl.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&s.version); err != nil {
		return nil, backendErr("connect", err)
	}
	rcfg, err := pgconn.ParseConfig(r.url)
	if err != nil {
		return nil, err
	}
	rcfg.RuntimeParams["replication"] = "database"
	if s.conn, err = pgconn.ConnectConfig(ctx, rcfg); err != nil {
		return nil, backendErr("replication connect", err)
	}
	r.m.setActive(1)
	return s, nil
}

// lock takes the slot's advisory lock on ctl, waiting as a standby while another
// relay holds it. The lock is the session's: it ends with ctl.
func (r *Relay) lock(ctx context.Context, ctl *pgx.Conn) error {
	logged := false
	for {
		var ok bool
		if err := ctl.QueryRow(ctx, lockSQL, r.cfg.Slot).Scan(&ok); err != nil {
			return backendErr("lock", err)
		}
		if ok {
			if logged {
				r.cfg.Logger.InfoContext(ctx, "cdc relay: took over the slot", "slot", r.cfg.Slot)
			}
			return nil
		}
		if !logged {
			r.cfg.Logger.InfoContext(ctx, "cdc relay: another relay reads the slot; standing by", "slot", r.cfg.Slot)
			r.prog.standby()
			logged = true
		}
		if !wait.Sleep(ctx, r.cfg.LockRetry) {
			return ctx.Err()
		}
	}
}

func backendErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *SetupError
	if errors.As(err, &se) {
		return err
	}
	return &idem.BackendError{Backend: "postgres", Op: "cdc." + op, Err: err}
}

// String describes the relay for logs, without credentials.
func (r *Relay) String() string {
	return fmt.Sprintf("cdc relay (slot %s, publication %s)", r.cfg.Slot, r.cfg.Publication)
}
