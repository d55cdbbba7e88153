package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/cmd/idem/internal/relay"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/redact"
)

// cdcOptions are the flags of idem relay --cdc.
type cdcOptions struct {
	on, dropSlot, messages, skipMark bool
	refuseSlotLoss                   bool
	slot, publication, src           string
	walWarn                          int64
}

func (c *cdcOptions) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.on, "cdc", false, "read the outbox from the PostgreSQL WAL (logical replication) instead of querying the table")
	fs.BoolVar(&c.dropSlot, "drop-slot", false, "with --cdc: drop the replication slot (and the WAL it retains) and exit")
	fs.StringVar(&c.slot, "slot", "idem_outbox", "with --cdc: the logical replication slot, created if missing")
	fs.StringVar(&c.publication, "publication", "idem_outbox", "with --cdc: the publication of the outbox table, created if missing")
	fs.StringVar(&c.src, "source", "", "with --cdc: the idem-source header of every message (default database/slot)")
	fs.Int64Var(&c.walWarn, "wal-warn-bytes", 1<<30, "with --cdc: warn when the slot retains more WAL than this")
	fs.BoolVar(&c.skipMark, "cdc-skip-mark", false, "with --cdc: do not mark the rows published (faster backlog; the audit, idem audit, then sees none of them, and they are never cleaned up)")
	fs.BoolVar(&c.refuseSlotLoss, "cdc-refuse-slot-loss", false, "with --cdc: stop when the slot this relay had is lost (dropped, a failover, "+
		"invalidated by max_slot_wal_keep_size) instead of re-creating it and publishing the outbox rows not marked published")
	fs.BoolVar(&c.messages, "cdc-messages", false, "with --cdc: also publish WAL messages (pgcdc.EmitTx); refused while a role without INSERT on the outbox "+
		"may execute pg_logical_emit_message, which PostgreSQL grants to PUBLIC")
}

// cdcConfig checks the flags of --cdc before anything connects, and returns the
// relay's configuration; its errors name the flag.
func (o *relayOptions) cdcConfig() (open.DBSpec, pgcdc.Config, error) {
	db, err := open.ParseDB(o.db)
	switch {
	case o.db == "":
		return db, pgcdc.Config{}, errors.New("--cdc needs --db postgres://user@host:5432/db (or $IDEM_DB), a server with wal_level=logical")
	case err != nil:
		return db, pgcdc.Config{}, err
	case db.Dialect != "postgres":
		return db, pgcdc.Config{}, fmt.Errorf("--cdc reads PostgreSQL's WAL: --db must be postgres://… (got %s); MySQL and SQLite relay by polling, without --cdc", db.Desc)
	case o.batch < 1 || o.batch > 10_000:
		return db, pgcdc.Config{}, fmt.Errorf("--batch must be 1 to 10000 (got %d)", o.batch)
	case o.maxAttempts < 1:
		return db, pgcdc.Config{}, fmt.Errorf("--max-attempts must be at least 1 (got %d)", o.maxAttempts)
	case o.stallAfter <= 0:
		return db, pgcdc.Config{}, fmt.Errorf("--stall-after must be positive, such as 1m (got %v)", o.stallAfter)
	}
	if err := checkAdminToken(o.adminToken, "--listen", o.listen); err != nil {
		return db, pgcdc.Config{}, err
	}
	cfg := pgcdc.Config{Slot: o.cdc.slot, Publication: o.cdc.publication, Source: o.cdc.src,
		BatchSize: o.batch, RetainedWALWarn: o.cdc.walWarn, Messages: o.cdc.messages, MaxAttempts: o.maxAttempts,
		SkipMarkPublished: o.cdc.skipMark, RefuseSlotLoss: o.cdc.refuseSlotLoss}
	_, err = pgcdc.New(o.db, nopSink{}, cfg) // checks cfg, before the sink connects
	return db, cfg, err
}

// nopSink stands in for the sink where none is needed (--drop-slot).
type nopSink struct{}

func (nopSink) Publish(context.Context, ...idem.Message) error {
	return errors.New("idem relay: internal error: publish without a sink")
}

func (m *Main) runRelayCDC(ctx context.Context, fs *flag.FlagSet, o *relayOptions) error {
	db, cfg, err := o.cdcConfig()
	if err != nil {
		return cli.UsageErr(fs, "%s", redact.String(err.Error()))
	}
	if o.cdc.dropSlot {
		r, err := pgcdc.New(o.db, nopSink{}, cfg)
		if err != nil {
			return cli.UsageErr(fs, "%s", err)
		}
		if err := r.DropSlot(ctx); err != nil {
			return errors.New(redact.String(err.Error()))
		}
		fmt.Fprintf(m.Stdout, "idem relay: dropped replication slot %s of %s\n", o.cdc.slot, db.Desc)
		return nil
	}
	ss, err := open.ParseSink(o.sink, &o.SinkFlags)
	if o.sink == "" {
		err = errors.New("--sink is required: pass nats://host:4222, kafka://host:9092, redis://host:6379, amqp://… or https://… (or set $IDEM_SINK)")
	}
	if err != nil {
		return cli.UsageErr(fs, "%s", redact.String(err.Error()))
	}
	log, reg, stopTracing, err := cli.StartDaemon(ctx, m.Stderr, "relay")
	if err != nil {
		return err
	}
	defer stopTracing()
	cfg.Registerer, cfg.Logger = reg, log
	sink, h, closeSink, err := o.openSink(ctx, ss, log)
	if err != nil {
		return err
	}
	defer closeSink()
	r, err := pgcdc.New(o.db, sink, cfg)
	if err != nil {
		return cli.UsageErr(fs, "%s", err)
	}
	// Fail fast on what no retry fixes (wal_level, privileges, publication, who may
	// write WAL messages).
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = r.Setup(sctx)
	cancel()
	var se *pgcdc.SetupError
	if errors.As(err, &se) && !errors.Is(err, pgcdc.ErrSlotTaken) {
		return errors.New(redact.String(err.Error()))
	}
	pool, err := pgxpool.New(ctx, o.db)
	if err != nil {
		return errors.New(redact.String(err.Error()))
	}
	defer pool.Close()
	handler := adminHandler(reg, cdcCheck(h, r, o.stallAfter))
	if o.adminToken != "" {
		// Parked messages are rows of the outbox table: its area lists them, and
		// retries one as a new row, which the relay reads.
		if handler, err = relayAdminAPI(o.adminToken, open.OutboxArea(idempg.TxDB(pool)), reg, log, handler); err != nil {
			return err
		}
	}
	// /healthz pings the database every --poll; the relay itself sends no query per
	// message.
	return relay.Serve(ctx, o.serving(m.Stderr), h, handler, r.Run, pool.Ping,
		fmt.Sprintf("%s → %s from the WAL (slot %s)", db.Desc, ss.Desc, o.cdc.slot))
}

// cdcCheck is /healthz of relay --cdc: the database answers (h), no message has
// waited for longer than stall with none published meanwhile, and the relay has not
// failed to stream the slot for that long. The reason is in idem's words
// (cli.ReasonOf), and says how many messages were parked.
func cdcCheck(h *relay.Health, r *pgcdc.Relay, stall time.Duration) func(context.Context) (bool, string) {
	return func(context.Context) (bool, string) {
		st := r.Health()
		if what, d := st.Stalled(time.Now(), stall); what != "" {
			if st.LastError != nil {
				what += ": " + cli.ReasonOf(st.LastError)
			}
			return false, fmt.Sprintf("unhealthy: %s for %v (limit %v)", what, d.Round(time.Millisecond), stall)
		}
		ok, msg := h.Check()
		if st.Parked > 0 {
			msg += fmt.Sprintf("; messages parked since the start: %d (idem outbox parked)", st.Parked)
		}
		return ok, msg
	}
}
