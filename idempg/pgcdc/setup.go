package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/internal/wait"
)

// slotInfo is the relay's slot as pg_replication_slots shows it.
type slotInfo struct {
	plugin    string
	active    bool
	pid       *int32
	confirmed *string
}

// start is where the slot's stream starts: its confirmed position.
func (s slotInfo) start() uint64 {
	if s.confirmed == nil {
		return 0
	}
	lsn, _ := parseLSN(*s.confirmed)
	return lsn
}

// check verifies the server settings logical decoding needs (wal_level, the role's
// replication privilege). Every failure is a *SetupError naming the fix. The
// publication and the slot are checked, and created, by the lock's holder only
// (checkPublication, ensureSlot): a standby would find the slot read by the active
// relay, and two relays creating them at once would race.
func (r *Relay) check(ctx context.Context, conn *pgx.Conn) error {
	// A pooler (PgBouncer in any mode, and poolers like it) answers the startup with
	// a process ID of its own; it cannot carry the replication protocol, and in
	// transaction mode the slot's session advisory lock would not hold.
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return err
	}
	if pid != conn.PgConn().PID() {
		return errPooler
	}
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return err
	}
	if level != "logical" {
		return &SetupError{Check: "wal_level", Got: fmt.Sprintf("the server runs with wal_level=%s, not logical", level),
			Fix: "set wal_level = logical in postgresql.conf (ALTER SYSTEM SET wal_level = logical) and restart the server; " +
				"managed services: RDS rds.logical_replication=1, Cloud SQL cloudsql.logical_decoding=on"}
	}
	var role string
	var super, repl bool
	if err := conn.QueryRow(ctx, "SELECT rolname, rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user").Scan(&role, &super, &repl); err != nil {
		return err
	}
	if !super && !repl {
		return &SetupError{Check: "privileges", Got: fmt.Sprintf("role %s may not use replication", role),
			Fix: fmt.Sprintf("ALTER ROLE %s REPLICATION (RDS: GRANT rds_replication TO %s), or connect as a role that has it", role, role)}
	}
	return nil
}

// qualified returns the outbox table as schema and name.
func (r *Relay) qualified(ctx context.Context, conn *pgx.Conn) (schema, table string, err error) {
	if s, t, ok := strings.Cut(r.cfg.Table, "."); ok {
		return s, t, nil
	}
	err = conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema)
	return schema, r.cfg.Table, err
}

// checkPublication creates the publication (inserts of the outbox table only) when
// missing, and refuses one that does not publish the outbox's inserts.
func (r *Relay) checkPublication(ctx context.Context, conn *pgx.Conn) error {
	schema, table, err := r.qualified(ctx, conn)
	if err != nil {
		return err
	}
	full := pgx.Identifier{schema, table}.Sanitize()
	var insert bool
	err = conn.QueryRow(ctx, "SELECT pubinsert FROM pg_publication WHERE pubname = $1", r.cfg.Publication).Scan(&insert)
	if errors.Is(err, pgx.ErrNoRows) {
		_, err = conn.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
			pgx.Identifier{r.cfg.Publication}.Sanitize(), full))
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42710" { // created by a racing relay
			return r.checkPublication(ctx, conn)
		}
		if err != nil {
			return &SetupError{Check: "publication", Got: fmt.Sprintf("cannot create publication %s on %s", r.cfg.Publication, full),
				Fix: fmt.Sprintf("create the outbox first (outbox.New or idem migrate), then as the table's owner: CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
					r.cfg.Publication, full), Err: err}
		}
		return nil
	}
	if err != nil {
		return err
	}
	rows, err := conn.Query(ctx, "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1", r.cfg.Publication)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	found := false
	for _, t := range tables {
		found = found || t == schema+"."+table
	}
	if !found || !insert {
		got := fmt.Sprintf("publication %s does not publish inserts of %s.%s (it publishes %s)", r.cfg.Publication, schema, table, strings.Join(tables, ", "))
		if len(tables) == 0 {
			got = fmt.Sprintf("publication %s publishes no table; %s.%s is needed", r.cfg.Publication, schema, table)
		}
		return &SetupError{Check: "publication", Got: got,
			Fix: fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s (and SET (publish = 'insert')), or set Config.Publication / --publication to a publication of the outbox",
				r.cfg.Publication, full)}
	}
	return nil
}

// ensureSlot creates the slot when missing and refuses one of another plugin or read
// by another process.
func (r *Relay) ensureSlot(ctx context.Context, conn *pgx.Conn) (slotInfo, error) {
	var s slotInfo
	err := conn.QueryRow(ctx, `SELECT COALESCE(plugin, ''), active, active_pid, confirmed_flush_lsn::text FROM pg_replication_slots
		WHERE slot_name = $1 AND (database = current_database() OR database IS NULL)`, r.cfg.Slot).Scan(&s.plugin, &s.active, &s.pid, &s.confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		var db string
		if err := conn.QueryRow(ctx, "SELECT database FROM pg_replication_slots WHERE slot_name = $1", r.cfg.Slot).Scan(&db); err == nil {
			return s, &SetupError{Check: "slot", Got: fmt.Sprintf("slot %s belongs to database %s", r.cfg.Slot, db),
				Fix: "slots are per database: pick another Config.Slot / --slot"}
		}
		if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", r.cfg.Slot); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42710" { // created by a racing relay
				return r.ensureSlot(ctx, conn)
			}
			return s, &SetupError{Check: "slot", Got: "cannot create slot " + r.cfg.Slot,
				Fix: "raise max_replication_slots, or drop unused slots (SELECT slot_name FROM pg_replication_slots)", Err: err}
		}
		r.cfg.Logger.InfoContext(ctx, "cdc relay: created replication slot", "slot", r.cfg.Slot)
		return r.ensureSlot(ctx, conn)
	}
	if err != nil {
		return s, err
	}
	if s.plugin != "pgoutput" {
		return s, &SetupError{Check: "slot", Got: fmt.Sprintf("slot %s decodes with %q, not pgoutput", r.cfg.Slot, s.plugin),
			Fix: "pick another Config.Slot / --slot, or drop that slot if nothing else uses it"}
	}
	if s.active {
		pid := int32(0)
		if s.pid != nil {
			pid = *s.pid
		}
		return s, &SetupError{Check: "slot", Got: fmt.Sprintf("slot %s is being read by server process %d", r.cfg.Slot, pid),
			Fix: fmt.Sprintf("stop that reader (SELECT pg_terminate_backend(%d)), or pick another Config.Slot / --slot; idem relays on one slot wait for each other by themselves", pid),
			Err: ErrSlotTaken}
	}
	return s, nil
}

// lockKey is the advisory lock one slot's relays take: the holder reads, the others
// wait as standbys.
const lockSQL = "SELECT pg_try_advisory_lock(hashtext('idem_cdc'), hashtext($1))"

// DropSlot drops the relay's slot (and so the WAL it retains). Messages committed
// since its confirmed position are then never relayed: do it when retiring the
// relay. It records the slot retired (idem_cdc_slots), so that a relay started
// later creates a new one, of a new source epoch, without taking it for a lost
// slot to recover. It fails with a *SetupError wrapping ErrSlotTaken while a
// reader holds it.
func (r *Relay) DropSlot(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		return backendErr("drop slot", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := r.dropSlot(ctx, conn); err != nil {
		return err
	}
	// Retired, not lost: the next start creates a slot of a new source epoch
	// without calling it a loss.
	schema, _, err := r.qualified(ctx, conn)
	if err != nil {
		return backendErr("drop slot", err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", r.slotsName(schema)).Scan(&exists); err != nil || !exists {
		return backendErr("drop slot", err)
	}
	_, err = conn.Exec(ctx, fmt.Sprintf("UPDATE %s SET retired = TRUE, recovering = FALSE, updated_at = $2 WHERE slot = $1", r.slotsName(schema)),
		r.cfg.Slot, time.Now().UnixMilli())
	return backendErr("drop slot", err)
}

// dropSlot drops the slot if it exists, waiting a little for a reader that just
// stopped.
func (r *Relay) dropSlot(ctx context.Context, conn *pgx.Conn) error {
	var err error
	// A relay that just stopped leaves its server process reading for a moment.
	for i := 0; ; i++ {
		_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", r.cfg.Slot)
		var pe *pgconn.PgError
		if i == 20 || !errors.As(err, &pe) || pe.Code != "55006" || !wait.Sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42704":
		return nil // already gone
	case errors.As(err, &pe) && pe.Code == "55006":
		return &SetupError{Check: "slot", Got: fmt.Sprintf("slot %s is being read", r.cfg.Slot), Fix: "stop the relay first", Err: ErrSlotTaken}
	}
	return backendErr("drop slot", err)
}

// SlotStatus is the slot as the server reports it.
type SlotStatus struct {
	Exists bool
	Active bool
	// Confirmed is the position up to which the broker acknowledged everything.
	Confirmed uint64
	// RetainedBytes is the WAL the server keeps for the slot (current position
	// minus restart_lsn); LagBytes is the current position minus Confirmed.
	RetainedBytes int64
	LagBytes      int64
}

// Status reads the slot's state.
func (r *Relay) Status(ctx context.Context) (SlotStatus, error) {
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		return SlotStatus{}, backendErr("status", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return r.status(ctx, conn)
}

func (r *Relay) status(ctx context.Context, conn *pgx.Conn) (SlotStatus, error) {
	var s SlotStatus
	var confirmed *string
	err := conn.QueryRow(ctx, `SELECT active, confirmed_flush_lsn::text,
		COALESCE(pg_current_wal_lsn() - restart_lsn, 0)::bigint, COALESCE(pg_current_wal_lsn() - confirmed_flush_lsn, 0)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, r.cfg.Slot).Scan(&s.Active, &confirmed, &s.RetainedBytes, &s.LagBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, backendErr("status", err)
	}
	s.Exists = true
	if confirmed != nil {
		lsn, err := parseLSN(*confirmed)
		if err != nil {
			return s, err
		}
		s.Confirmed = lsn
	}
	return s, nil
}
