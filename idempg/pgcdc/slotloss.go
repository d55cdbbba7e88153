package pgcdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/outbox"
)

// Slot loss. A PostgreSQL 15 logical slot lives on one server: a promoted standby
// has none, an operator may drop it, and max_slot_wal_keep_size invalidates one
// that fell too far behind (wal_status 'lost'). A slot created again starts at the
// server's current position: what committed between the old slot's confirmed
// position and the new slot's start would never be streamed. The relay therefore
// keeps one row per slot in idem_cdc_slots (beside the outbox table) which says
// that it had a slot, and recovers the gap from the outbox table itself:
//
//  1. it records that a recovery runs (recovering, and the next source epoch),
//  2. creates the slot with CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT,
//  3. reads, in a transaction on that snapshot, the outbox rows neither marked
//     published nor parked: exactly the rows committed before the slot's start
//     that no relay marked, which the slot will not stream and which are all the
//     rows the gap holds (a row is marked before its position is confirmed),
//  4. publishes them in id order under the new epoch's source, marks them, and
//     records the recovery done; then it streams from the new slot.
//
// A relay that dies during the recovery leaves recovering set: the next one drops
// the half-used slot and recovers again; the rows marked meanwhile are not sent
// again.

// slotsTable is the relay's state table, in the outbox table's schema. The
// outbox's PostgreSQL migration 005 (migrate.Outbox, `idem migrate up`) creates it;
// the relay creates it itself only where it is missing and the role may.
const slotsTable = "idem_cdc_slots"

// slotsDDL is the fallback that creates slotsTable, as migration 005_cdc_slots does:
// per slot, the source epoch (1 for the first slot, one more per slot lost or
// retired), where the current slot started, the last confirmed position the relay
// recorded (a lower bound: recorded at each CheckInterval), whether a recovery is
// under way, whether DropSlot retired it, and the positions of the last recovery's
// messages: {gap_lsn, id - gap_base}.
const slotsDDL = `CREATE TABLE IF NOT EXISTS %s (
	slot TEXT PRIMARY KEY,
	epoch INTEGER NOT NULL,
	created_lsn PG_LSN NOT NULL,
	confirmed_lsn PG_LSN NOT NULL,
	recovering BOOLEAN NOT NULL DEFAULT FALSE,
	retired BOOLEAN NOT NULL DEFAULT FALSE,
	gap_lsn PG_LSN,
	gap_base BIGINT,
	updated_at BIGINT NOT NULL)`

// slotState is the relay's row of slotsTable.
type slotState struct {
	found      bool
	epoch      int
	created    uint64
	confirmed  uint64
	recovering bool
	retired    bool
	gapLSN     uint64 // 0 when no recovery recorded its positions
	gapBase    int64
}

// slotLoss is a slot the relay had and cannot stream from.
type slotLoss struct {
	why   string // for the log and Health
	state slotState
}

// SlotLoss is what Health reports of the last replication slot the relay found
// lost, from its detection to the end of its recovery.
type SlotLoss struct {
	// Reason says how it was lost: missing (dropped, or the server is a promoted
	// standby), invalidated (wal_status lost), or a recovery that did not finish.
	Reason string
	// From is the last confirmed position the relay recorded on the lost slot (at
	// or before the real one); To is the new slot's start. Outbox rows committed
	// between them are recovered; WAL-only messages (EmitTx) there are lost.
	From, To uint64
	// Source is the idem-source header of the recovered messages and of all after.
	Source string
	// Recovered counts the outbox rows published by the recovery so far.
	Recovered int64
	// Detected is when the relay found the slot lost; Finished when the recovery
	// ended, zero while it runs.
	Detected, Finished time.Time
}

// epochSource is the source of epoch: the configured one for the first slot, and
// "source@epoch" after, so that a consumer's watermark of the lost slot (whose
// positions a promoted standby's log may repeat for other transactions) does not
// drop the new slot's messages.
func epochSource(base string, epoch int) string {
	if epoch <= 1 {
		return base
	}
	return base + "@" + strconv.Itoa(epoch)
}

func (r *Relay) slotsName(schema string) string {
	return pgx.Identifier{schema, slotsTable}.Sanitize()
}

// ensureSlotsTable checks that slotsTable exists and that the role may read and
// write it. Where the migration has not created it, it creates it as a fallback:
// CREATE TABLE IF NOT EXISTS needs CREATE on the schema even when the table
// exists, so it runs only when the table is missing.
func (r *Relay) ensureSlotsTable(ctx context.Context, conn *pgx.Conn, schema string) error {
	name := r.slotsName(schema)
	var role string
	var exists, ok bool
	err := conn.QueryRow(ctx, `SELECT current_user, to_regclass($1) IS NOT NULL,
		to_regclass($1) IS NOT NULL AND has_table_privilege($1, 'SELECT') AND has_table_privilege($1, 'INSERT') AND has_table_privilege($1, 'UPDATE')`,
		name).Scan(&role, &exists, &ok)
	if err != nil {
		return backendErr("read state", err)
	}
	quoted := pgx.Identifier{role}.Sanitize()
	switch {
	case ok:
		return nil
	case exists:
		return &SetupError{Check: "state", Got: fmt.Sprintf("role %s may not read and write the relay's state table %s", role, name),
			Fix: fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON %s TO %s", name, quoted)}
	}
	_, err = conn.Exec(ctx, fmt.Sprintf(slotsDDL, name))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07") { // created by a racing relay
		return nil
	}
	if err != nil {
		return &SetupError{Check: "state", Got: fmt.Sprintf("the relay's state table %s is missing, and role %s may not create it", name, role),
			Fix: fmt.Sprintf("apply the outbox's migrations on the outbox's database as the schema's owner (idem migrate up, or migrate.Up with migrate.Outbox; "+
				"its 005_cdc_slots creates the table), then GRANT SELECT, INSERT, UPDATE ON %s TO %s", name, quoted), Err: err}
	}
	return nil
}

func (r *Relay) readSlotState(ctx context.Context, conn *pgx.Conn, schema string) (slotState, error) {
	var st slotState
	var created, confirmed string
	var gapLSN *string
	var gapBase *int64
	err := conn.QueryRow(ctx, fmt.Sprintf("SELECT epoch, created_lsn::text, confirmed_lsn::text, recovering, retired, gap_lsn::text, gap_base FROM %s WHERE slot = $1",
		r.slotsName(schema)), r.cfg.Slot).Scan(&st.epoch, &created, &confirmed, &st.recovering, &st.retired, &gapLSN, &gapBase)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, backendErr("read state", err)
	}
	st.found = true
	if st.created, err = parseLSN(created); err == nil {
		st.confirmed, err = parseLSN(confirmed)
	}
	if err == nil && gapLSN != nil && gapBase != nil {
		st.gapLSN, err = parseLSN(*gapLSN)
		st.gapBase = *gapBase
	}
	return st, err
}

// detectLoss reads the slot and the relay's state row: a slot the relay had
// (a row not retired) that is missing or invalidated, or a recovery that did not
// finish, is a loss. A first start (no row) is not, nor a slot found where the
// relay has no row (adopted, as from a relay before this table).
func (r *Relay) detectLoss(ctx context.Context, conn *pgx.Conn, schema string) (*slotLoss, slotState, error) {
	if err := r.ensureSlotsTable(ctx, conn, schema); err != nil {
		return nil, slotState{}, err
	}
	st, err := r.readSlotState(ctx, conn, schema)
	if err != nil || !st.found || st.retired {
		return nil, st, err
	}
	if st.recovering {
		return &slotLoss{why: "a recovery of the lost slot did not finish", state: st}, st, nil
	}
	var walStatus *string
	var here bool
	err = conn.QueryRow(ctx, "SELECT wal_status, COALESCE(database, '') = current_database() FROM pg_replication_slots WHERE slot_name = $1",
		r.cfg.Slot).Scan(&walStatus, &here)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &slotLoss{why: "the slot is missing (dropped, or this server was promoted from a standby: PostgreSQL 15 slots do not fail over)", state: st}, st, nil
	case err != nil:
		return nil, st, backendErr("read slot", err)
	case !here:
		return nil, st, nil // another database's: ensureSlot says so
	case walStatus != nil && *walStatus == "lost":
		return &slotLoss{why: "the server invalidated the slot (wal_status lost: it retained more WAL than max_slot_wal_keep_size)", state: st}, st, nil
	}
	return nil, st, nil
}

// recordSlot writes the state row of a slot the relay created or adopted, without a
// loss: epoch 1 on a first start, one more after a retired slot.
func (r *Relay) recordSlot(ctx context.Context, conn *pgx.Conn, schema string, st slotState, start uint64) (int, error) {
	if st.found && !st.retired {
		return st.epoch, nil
	}
	epoch := 1
	if st.found {
		epoch = st.epoch + 1
	}
	_, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (slot, epoch, created_lsn, confirmed_lsn, updated_at) VALUES ($1, $2, $3::pg_lsn, $3::pg_lsn, $4)
		ON CONFLICT (slot) DO UPDATE SET epoch = EXCLUDED.epoch, created_lsn = EXCLUDED.created_lsn, confirmed_lsn = EXCLUDED.confirmed_lsn,
		recovering = FALSE, retired = FALSE, updated_at = EXCLUDED.updated_at`, r.slotsName(schema)),
		r.cfg.Slot, epoch, FormatLSN(start), time.Now().UnixMilli())
	if err != nil {
		return 0, backendErr("record state", err)
	}
	return epoch, nil
}

// recordConfirmed records the slot's confirmed position, where a loss's gap starts.
func (s *stream) recordConfirmed(ctx context.Context) error {
	if s.confirmed <= s.recorded {
		return nil
	}
	_, err := s.ctl.Exec(ctx, fmt.Sprintf("UPDATE %s SET confirmed_lsn = $2::pg_lsn, updated_at = $3 WHERE slot = $1 AND NOT recovering",
		s.r.slotsName(s.schema)), s.r.cfg.Slot, FormatLSN(s.confirmed), time.Now().UnixMilli())
	if err != nil {
		return backendErr("record state", err)
	}
	s.recorded = s.confirmed
	return nil
}

// snapshotName is what the server names an exported snapshot ("00000003-0000001B-1").
var snapshotName = regexp.MustCompile(`^[0-9A-F]+(-[0-9A-F]+)+$`)

// recoverSlot re-creates a lost slot and publishes the outbox rows committed while
// it was lost (see above). It returns the new epoch. s is the session's stream,
// not yet streaming: its batch carries the recovered messages.
func (r *Relay) recoverSlot(ctx context.Context, s *stream, base string, loss *slotLoss) (epoch int, err error) {
	st := loss.state
	from := FormatLSN(st.confirmed)
	if r.cfg.SkipMarkPublished {
		return 0, &SetupError{Check: "slot", Got: fmt.Sprintf("replication slot %s was lost (%s) and the relay runs with SkipMarkPublished, "+
			"so it cannot tell which outbox rows it published: rows committed after %s were not published", r.cfg.Slot, loss.why, from),
			Fix: "publish the outbox rows committed since then yourself, set their published_at, and run the relay without SkipMarkPublished " +
				"(--cdc-skip-mark) once to recover; or accept the gap: retire the slot (idem relay --cdc --drop-slot, Relay.DropSlot) and start again"}
	}
	if r.cfg.RefuseSlotLoss {
		return 0, &SetupError{Check: "slot", Got: fmt.Sprintf("replication slot %s was lost (%s): outbox rows and WAL messages committed after %s "+
			"may be unpublished, and Config.RefuseSlotLoss is set", r.cfg.Slot, loss.why, from),
			Fix: "let the relay recover (run it without RefuseSlotLoss / --cdc-refuse-slot-loss): it republishes the outbox rows not marked published; " +
				"or mark by hand those you do not want sent (UPDATE idem_outbox SET published_at = …) and then let it recover the rest; " +
				"or accept the gap: retire the slot (idem relay --cdc --drop-slot, Relay.DropSlot) and start again"}
	}
	epoch = st.epoch
	if !st.recovering {
		epoch++
	}
	source := epochSource(base, epoch)
	info := &SlotLoss{Reason: loss.why, From: st.confirmed, Source: source, Detected: time.Now()}
	r.prog.update(func(h *Health) { c := *info; h.SlotLoss = &c })
	if !st.recovering {
		if m := r.m; m != nil {
			m.slotLost.Inc()
		}
	}
	r.cfg.Logger.ErrorContext(ctx, "cdc relay: replication slot lost; re-creating it and publishing the outbox rows committed meanwhile",
		"slot", r.cfg.Slot, "why", loss.why, "gap_from", from, "source", source,
		"lost", "WAL-only messages (EmitTx) committed after gap_from and not published are lost: they have no row to recover")
	// The gap's positions are the first attempt's: a new loss forgets the last one's.
	_, err = s.ctl.Exec(ctx, fmt.Sprintf(`UPDATE %s SET recovering = TRUE, epoch = $2, updated_at = $3,
		gap_lsn = CASE WHEN recovering THEN gap_lsn END, gap_base = CASE WHEN recovering THEN gap_base END WHERE slot = $1`, r.slotsName(s.schema)),
		r.cfg.Slot, epoch, time.Now().UnixMilli())
	if err != nil {
		return 0, backendErr("record state", err)
	}
	if err := r.dropSlot(ctx, s.ctl); err != nil {
		return 0, err
	}
	rcfg, err := pgconn.ParseConfig(r.url)
	if err != nil {
		return 0, err
	}
	rcfg.RuntimeParams["replication"] = "database"
	rconn, err := pgconn.ConnectConfig(ctx, rcfg)
	if err != nil {
		return 0, backendErr("replication connect", err)
	}
	defer rconn.Close(context.WithoutCancel(ctx))
	res, err := pglogrepl.CreateReplicationSlot(ctx, rconn, r.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return 0, &SetupError{Check: "slot", Got: "cannot create slot " + r.cfg.Slot,
			Fix: "raise max_replication_slots, or drop unused slots (SELECT slot_name FROM pg_replication_slots)", Err: err}
	}
	start, err := parseLSN(res.ConsistentPoint)
	if err != nil || start == 0 || !snapshotName.MatchString(res.SnapshotName) {
		return 0, backendErr("create slot", fmt.Errorf("unexpected answer to CREATE_REPLICATION_SLOT: %+v", res))
	}
	info.To = start
	snap, err := pgx.Connect(ctx, r.url)
	if err != nil {
		return 0, backendErr("connect", err)
	}
	defer snap.Close(context.WithoutCancel(ctx))
	tx, err := snap.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, backendErr("recover", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+res.SnapshotName+"'"); err != nil {
		return 0, backendErr("recover", fmt.Errorf("import the new slot's snapshot: %w", err))
	}
	// The snapshot is imported: the exporting connection may go, and the slot waits
	// (keeping its WAL) until the session streams from it.
	rconn.Close(ctx)

	// Positions: the new slot streams commits at or after start, so the recovered
	// messages sit just before it, {start-1, id - baseID} in id order, baseID being the
	// first row's id less one. A recovery that died and runs again (on a slot
	// created later) keeps the first one's positions: a row it published and did
	// not mark goes out again where it was, and a consumer's watermark drops it.
	s.source = source
	clear(s.r.parked)
	clear(s.r.attempts)
	table := pgx.Identifier{s.schema, s.table}.Sanitize()
	commit, baseID := st.gapLSN, st.gapBase
	if !st.recovering || commit == 0 {
		commit = start - 1
		if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT COALESCE(MIN(id), 1) - 1 FROM %s WHERE published_at IS NULL AND parked_at IS NULL", table)).Scan(&baseID); err != nil {
			return 0, backendErr("recover", err)
		}
		_, err = s.ctl.Exec(ctx, fmt.Sprintf("UPDATE %s SET gap_lsn = $2::pg_lsn, gap_base = $3, updated_at = $4 WHERE slot = $1", r.slotsName(s.schema)),
			r.cfg.Slot, FormatLSN(commit), baseID, time.Now().UnixMilli())
		if err != nil {
			return 0, backendErr("record state", err)
		}
	}
	q := fmt.Sprintf(`SELECT id, msg_id, topic, ordering_key, headers, payload FROM %s
		WHERE published_at IS NULL AND parked_at IS NULL AND id > $1 ORDER BY id LIMIT $2`, table)
	for last := int64(0); ; {
		rows, err := tx.Query(ctx, q, last, r.cfg.BatchSize)
		if err != nil {
			return 0, backendErr("recover", err)
		}
		type gapRow struct {
			id      int64
			msg     idem.Message
			headers string
		}
		var page []gapRow
		for rows.Next() {
			var g gapRow
			if err := rows.Scan(&g.id, &g.msg.ID, &g.msg.Topic, &g.msg.OrderingKey, &g.headers, &g.msg.Payload); err != nil {
				rows.Close()
				return 0, backendErr("recover", err)
			}
			page = append(page, g)
		}
		if err := rows.Err(); err != nil {
			return 0, backendErr("recover", err)
		}
		if len(page) == 0 {
			break
		}
		for _, g := range page {
			last = g.id
			pos := position{commit: commit}
			switch off := g.id - baseID; {
			case off >= 1<<32:
				return 0, backendErr("recover", fmt.Errorf("outbox row %d is more than 2^32 ids after the gap's first (%d): too large a gap for one recovery", g.id, baseID+1))
			case off > 0:
				pos.index = int(off)
			default:
				// Committed after the first recovery's slot with an id below its rows (its
				// id was taken before, its transaction id after the slot's start): a
				// consumer whose watermark passed index 0 of the gap drops it.
				r.cfg.Logger.WarnContext(ctx, "cdc relay: recovering a row whose id precedes the gap's; consumers deduplicating by position may drop it",
					"row", g.id, "id", g.msg.ID)
			}
			m := g.msg
			var err error
			if g.headers != "" && g.headers != "{}" {
				err = json.Unmarshal([]byte(g.headers), &m.Headers)
			}
			if err == nil {
				err = m.Validate()
			}
			if err != nil {
				if err := s.park(ctx, pos, outbox.Unpublishable{Row: g.id, Message: m, RawHeaders: g.headers}, err); err != nil {
					return 0, err
				}
				continue
			}
			h := make(map[string]string, len(m.Headers)+3)
			for k, v := range m.Headers {
				h[k] = v
			}
			h[HeaderSource], h[HeaderLSN], h[HeaderIndex] = source, FormatLSN(commit), strconv.Itoa(pos.index)
			s.meta = append(s.meta, item{pos: pos, at: time.Now(), row: g.id, headers: m.Headers})
			m.Headers = h
			s.batch = append(s.batch, m)
		}
		n, err := s.recoverBatch(ctx)
		info.Recovered += n
		r.prog.update(func(h *Health) { c := *info; h.SlotLoss = &c })
		if m := r.m; m != nil {
			m.slotRecovered.Add(float64(n))
		}
		if err != nil {
			return 0, err
		}
	}
	_, err = s.ctl.Exec(ctx, fmt.Sprintf(`UPDATE %s SET recovering = FALSE, created_lsn = $2::pg_lsn, confirmed_lsn = $2::pg_lsn, updated_at = $3
		WHERE slot = $1`, r.slotsName(s.schema)), r.cfg.Slot, FormatLSN(start), time.Now().UnixMilli())
	if err != nil {
		return 0, backendErr("record state", err)
	}
	clear(s.r.parked)
	info.Finished = time.Now()
	r.prog.update(func(h *Health) { c := *info; h.SlotLoss = &c })
	r.cfg.Logger.ErrorContext(ctx, "cdc relay: replication slot lost and re-created; the outbox rows committed meanwhile are published",
		"slot", r.cfg.Slot, "why", loss.why, "gap_from", from, "gap_to", FormatLSN(start), "rows_recovered", info.Recovered, "source", source,
		"lost", "WAL-only messages (EmitTx) committed in the gap and not published before it are lost: they have no row",
		"copies", "rows the broker acknowledged but the relay did not mark before the loss are published again under the new source: "+
			"consumers drop them by ID (inbox keys, broker dedup), not by position")
	return epoch, nil
}

// recoverBatch publishes the recovered messages in the batch and marks their rows.
// A message the sink refuses as invalid is parked; any other failure ends the
// session, and the next one recovers again what is not marked.
func (s *stream) recoverBatch(ctx context.Context) (published int64, err error) {
	defer func() {
		clear(s.batch)
		s.batch, s.meta = s.batch[:0], s.meta[:0]
	}()
	if len(s.batch) == 0 {
		return 0, nil
	}
	err = s.publish(ctx, s.batch...)
	if err == nil {
		published = int64(len(s.batch))
	} else {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		for i := range s.batch {
			err = s.publish(ctx, s.batch[i])
			switch {
			case err == nil:
				published++
			case ctx.Err() != nil:
				return 0, ctx.Err()
			case unpublishable(err):
				if err := s.parkSent(ctx, i, err); err != nil {
					return 0, err
				}
			default:
				// Mark what went through, so that it is not sent again.
				if merr := s.mark(ctx, i); merr != nil {
					return 0, merr
				}
				return published, &idem.BackendError{Backend: "sink", Op: "cdc.recover", Err: err}
			}
		}
	}
	if s.r.afterPublish != nil {
		s.r.afterPublish()
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if m := s.r.m; m != nil {
		m.published.Add(float64(published))
	}
	return published, s.mark(ctx, len(s.batch))
}
