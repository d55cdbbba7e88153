package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/redact"
)

// cdcOptions are the flags of idem relay --cdc.
type cdcOptions struct {
	on, dropSlot           bool
	slot, publication, src string
	walWarn                int64
}

func (c *cdcOptions) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.on, "cdc", false, "read the outbox from the PostgreSQL WAL (logical replication) instead of querying the table")
	fs.BoolVar(&c.dropSlot, "drop-slot", false, "with --cdc: drop the replication slot (and the WAL it retains) and exit")
	fs.StringVar(&c.slot, "slot", "idem_outbox", "with --cdc: the logical replication slot, created if missing")
	fs.StringVar(&c.publication, "publication", "idem_outbox", "with --cdc: the publication of the outbox table, created if missing")
	fs.StringVar(&c.src, "source", "", "with --cdc: the idem-source header of every message (default database/slot)")
	fs.Int64Var(&c.walWarn, "wal-warn-bytes", 1<<30, "with --cdc: warn when the slot retains more WAL than this")
}

// nopSink stands in for the sink where none is needed (--drop-slot).
type nopSink struct{}

func (nopSink) Publish(context.Context, ...idem.Message) error {
	return errors.New("idem relay: internal error: publish without a sink")
}

func (m *Main) runRelayCDC(ctx context.Context, fs *flag.FlagSet, o *relayOptions) error {
	db, err := parseDB(o.db)
	switch {
	case o.db == "":
		return usageErr(fs, "--cdc needs --db postgres://user@host:5432/db (or $IDEM_DB), a server with wal_level=logical")
	case err != nil:
		return usageErr(fs, "%s", redact.String(err.Error()))
	case db.dialect != "postgres":
		return usageErr(fs, "--cdc reads PostgreSQL's WAL: --db must be postgres://… (got %s); MySQL and SQLite relay by polling, without --cdc", db.desc)
	case o.batch < 1 || o.batch > 10_000:
		return usageErr(fs, "--batch must be 1 to 10000 (got %d)", o.batch)
	}
	cfg := pgcdc.Config{Slot: o.cdc.slot, Publication: o.cdc.publication, Source: o.cdc.src,
		BatchSize: o.batch, RetainedWALWarn: o.cdc.walWarn}
	if o.cdc.dropSlot {
		r, err := pgcdc.New(o.db, nopSink{}, cfg)
		if err != nil {
			return usageErr(fs, "%s", err)
		}
		if err := r.DropSlot(ctx); err != nil {
			return errors.New(redact.String(err.Error()))
		}
		fmt.Fprintf(m.Stdout, "idem relay: dropped replication slot %s of %s\n", o.cdc.slot, db.desc)
		return nil
	}
	ss, err := parseSink(o.sink, o)
	if o.sink == "" {
		err = errors.New("--sink is required: pass nats://host:4222, kafka://host:9092, redis://host:6379, amqp://… or https://… (or set $IDEM_SINK)")
	}
	if err != nil {
		return usageErr(fs, "%s", redact.String(err.Error()))
	}
	log := m.daemonLog()
	stopTracing, err := m.startTracing(ctx, "relay", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Registerer, cfg.Logger = reg, log
	sink, closeSink, err := ss.open(ctx, o)
	if err != nil {
		return err
	}
	defer closeSink()
	h := newHealth(3*o.poll, log)
	r, err := pgcdc.New(o.db, trackedSink{Sink: sink, h: h}, cfg)
	if err != nil {
		return usageErr(fs, "%s", err)
	}
	// Fail fast on what no retry fixes (wal_level, privileges, publication).
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
	// /healthz pings the database every --poll; the relay itself sends no query per
	// message.
	return m.serveRelay(ctx, o, h, relayHandler(reg, h), r.Run, pool.Ping,
		fmt.Sprintf("%s → %s from the WAL (slot %s)", db.desc, ss.desc, o.cdc.slot))
}
