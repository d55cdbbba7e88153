package pgcdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/outbox"
)

// stream is one replication session: it reads the slot's changes, publishes the
// outbox's messages in commit order and confirms a transaction's end to the server
// only once the broker acknowledged it and everything before it.
type stream struct {
	r       *Relay
	conn    *pgconn.PgConn // replication connection
	ctl     *pgx.Conn      // holds the lock; reads the slot's state
	source  string
	schema  string
	table   string
	rels    map[uint32]*relation // the outbox table's relation ids
	version int                  // server_version_num
	flushed int                  // batches the broker acknowledged in this session
	started bool                 // streaming: close says goodbye

	inTx   bool
	txLSN  pglogrepl.LSN
	txIdx  int
	txTime time.Time
	txXid  uint32 // the transaction's ID: the mark waits until it is visible

	batch []idem.Message
	meta  []item  // beside each message of batch
	ends  []txEnd // the transactions completed in batch, in order
	// held messages at the front of batch failed Config.MaxAttempts times in a row:
	// they wait for a message after them (to be parked once it goes through), and
	// are sent again at retryAt.
	held    int
	retryAt time.Time

	confirmed  uint64 // the slot's confirmed position, as this session reported it
	recorded   uint64 // the confirmed position last written to the state row
	walEnd     uint64 // the server's latest position as it told us
	lastStatus time.Time
	nextCheck  time.Time
}

// close ends the session's connections: the lock goes with ctl. It reports the
// confirmed position once more and waits (up to a second) for the server's answer,
// which the server sends only after it has applied the report: a status written
// just before the connection closes could otherwise be lost with it.
func (s *stream) close(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if s.conn != nil {
		if s.started && !s.conn.IsClosed() {
			s.goodbye(ctx)
		}
		s.r.m.setActive(0)
		s.conn.Close(ctx)
	}
	s.ctl.Close(ctx)
}

func (s *stream) goodbye(ctx context.Context) {
	p := pglogrepl.LSN(s.confirmed)
	if pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: p, WALFlushPosition: p, WALApplyPosition: p, ReplyRequested: true}) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for {
		msg, err := s.conn.ReceiveMessage(ctx)
		if err != nil {
			return
		}
		if cd, ok := msg.(*pgproto3.CopyData); ok && len(cd.Data) > 0 && cd.Data[0] == pglogrepl.PrimaryKeepaliveMessageByteID {
			return
		}
	}
}

func (s *stream) start(ctx context.Context) error {
	args := []string{"proto_version '1'", "publication_names '" + s.r.cfg.Publication + "'"}
	if s.version >= 140000 {
		args = append(args, "messages 'true'") // EmitTx's messages
	}
	err := pglogrepl.StartReplication(ctx, s.conn, s.r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55006" { // object_in_use: the slot is active
		return &SetupError{Check: "slot", Got: fmt.Sprintf("slot %s is being read by another process: %s", s.r.cfg.Slot, pe.Message),
			Fix: "stop that reader (pg_terminate_backend(active_pid) from pg_replication_slots), or pick another Config.Slot / --slot", Err: ErrSlotTaken}
	}
	if err != nil {
		return backendErr("start replication", err)
	}
	s.lastStatus, s.started = time.Now(), true
	return nil
}

func (s *stream) run(ctx context.Context) error {
	cfg := s.r.cfg
	for {
		now := time.Now()
		if now.Sub(s.lastStatus) >= cfg.StatusInterval {
			if err := s.status(ctx); err != nil {
				return err
			}
		}
		if !now.Before(s.nextCheck) {
			if err := s.checkSlot(ctx); err != nil {
				return err
			}
			s.nextCheck = now.Add(cfg.CheckInterval)
		}
		s.gauges(now)
		deadline := now.Add(min(cfg.StatusInterval, time.Until(s.nextCheck)))
		switch {
		case len(s.batch) > s.held:
			deadline = now.Add(cfg.FlushAfter)
		case s.held > 0 && s.retryAt.Before(deadline):
			deadline = s.retryAt
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		msg, err := s.conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				if len(s.batch) > s.held || s.held > 0 && !time.Now().Before(s.retryAt) {
					if err := s.flush(ctx); err != nil {
						return err
					}
				}
				continue
			}
			return backendErr("receive", err)
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.copyData(ctx, msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return backendErr("receive", pgconn.ErrorResponseToPgError(msg))
		default:
			return backendErr("receive", fmt.Errorf("unexpected %T from the server", msg))
		}
		if len(s.batch) >= cfg.BatchSize {
			if err := s.flush(ctx); err != nil {
				return err
			}
		}
	}
}

func (s *stream) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return backendErr("receive", errors.New("empty CopyData"))
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return backendErr("receive", err)
		}
		s.walEnd = max(s.walEnd, uint64(k.ServerWALEnd))
		// The server sends a keepalive after everything it decoded before
		// ServerWALEnd: with nothing of ours pending, all of that is acknowledged, and
		// confirming it lets the server recycle WAL written by other tables.
		if !s.inTx && len(s.batch) == 0 && uint64(k.ServerWALEnd) > s.confirmed {
			s.confirm(uint64(k.ServerWALEnd))
		}
		if k.ReplyRequested {
			return s.status(ctx)
		}
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return backendErr("receive", err)
		}
		s.walEnd = max(s.walEnd, uint64(x.ServerWALEnd))
		return s.decode(ctx, x.WALData)
	}
	return nil
}

// decode handles one pgoutput message.
func (s *stream) decode(ctx context.Context, data []byte) error {
	m, err := parse(data)
	if err != nil {
		return backendErr("decode", err)
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		if m.Namespace == s.schema && m.RelationName == s.table {
			rel, err := newRelation(m)
			if err != nil {
				return &SetupError{Check: "publication", Got: err.Error(), Fix: "publish the idem outbox table (outbox.New creates it)"}
			}
			s.rels[m.RelationID] = rel
		} else {
			delete(s.rels, m.RelationID)
		}
	case *pglogrepl.BeginMessage:
		s.inTx, s.txLSN, s.txIdx, s.txTime, s.txXid = true, m.FinalLSN, 0, m.CommitTime, m.Xid
	case *pglogrepl.InsertMessage:
		rel, ok := s.rels[m.RelationID]
		if !ok {
			return nil // another table someone added to the publication
		}
		w, err := rel.decode(m.Tuple)
		if w.parked {
			return nil // a message a relay parked: for an operator, not the broker
		}
		return s.take(ctx, w.msg, w.id, w.headers, err)
	case *pglogrepl.LogicalDecodingMessage:
		if m.Prefix != EmitPrefix || !m.Transactional {
			return nil
		}
		if !s.r.cfg.Messages {
			s.r.ignore(ctx, s.txLSN)
			return nil
		}
		msg, err := decodeEmitted(m.Content)
		return s.take(ctx, msg, 0, "", err)
	case *pglogrepl.CommitMessage:
		s.inTx = false
		end := uint64(m.TransactionEndLSN)
		if len(s.batch) == 0 {
			// Nothing of this transaction waits for the broker (it had no messages, they
			// were parked, or they were all acknowledged in batches that filled up).
			if end > s.confirmed {
				s.confirm(end)
				return s.status(ctx)
			}
			return nil
		}
		s.ends = append(s.ends, txEnd{commit: uint64(m.CommitLSN), end: end})
	}
	return nil
}

// take adds a message of the current transaction to the batch, or parks it when it
// could not be decoded (err): what is wrong with it will not change, and waiting
// for it would hold back everything after it.
func (s *stream) take(ctx context.Context, m idem.Message, row int64, rawHeaders string, err error) error {
	pos := position{commit: uint64(s.txLSN), index: s.txIdx}
	s.txIdx++
	if s.r.parked[pos] {
		return nil // parked already by this relay, read again after a failed session
	}
	if err != nil {
		return s.park(ctx, pos, outbox.Unpublishable{Row: row, Message: m, RawHeaders: rawHeaders}, err)
	}
	if len(s.batch) == 0 {
		s.r.prog.waiting(time.Now())
	}
	h := make(map[string]string, len(m.Headers)+3)
	for k, v := range m.Headers {
		h[k] = v
	}
	h[HeaderSource] = s.source
	h[HeaderLSN] = s.txLSN.String()
	h[HeaderIndex] = strconv.Itoa(pos.index)
	s.meta = append(s.meta, item{pos: pos, at: s.txTime, xid: s.txXid, row: row, headers: m.Headers})
	m.Headers = h
	s.batch = append(s.batch, m)
	return nil
}

// status reports the confirmed position as written, flushed and applied: the
// server keeps the WAL after it, and a new session streams from it.
func (s *stream) status(ctx context.Context) error {
	p := pglogrepl.LSN(s.confirmed)
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: p, WALFlushPosition: p, WALApplyPosition: p})
	s.lastStatus = time.Now()
	return backendErr("status", err)
}

// checkSlot reads the slot's retained WAL, warns when it is large, proves the
// lock's connection alive and, with Config.Messages, checks again who may write WAL
// messages.
func (s *stream) checkSlot(ctx context.Context) error {
	st, err := s.r.status(ctx, s.ctl)
	if err != nil {
		return err
	}
	if s.r.cfg.Messages { // a grant since the start would let any role write to the broker
		if err := s.r.checkEmitters(ctx, s.ctl, pgx.Identifier{s.schema, s.table}.Sanitize()); err != nil {
			return backendErr("check", err)
		}
	}
	// Where the gap of a slot lost from now on would start: once per check.
	if err := s.recordConfirmed(ctx); err != nil {
		return err
	}
	if m := s.r.m; m != nil {
		m.retained.Set(float64(st.RetainedBytes))
	}
	if st.RetainedBytes > s.r.cfg.RetainedWALWarn {
		s.r.cfg.Logger.WarnContext(ctx, "cdc relay: the slot retains much WAL; the server's disk fills while it grows",
			"slot", s.r.cfg.Slot, "retained_bytes", st.RetainedBytes, "warn_above", s.r.cfg.RetainedWALWarn,
			"fix", "check the broker and this relay; drop the slot (idem relay --cdc --drop-slot) if the relay is retired")
	}
	return nil
}

func (s *stream) gauges(now time.Time) {
	m := s.r.m
	if m == nil {
		return
	}
	if s.walEnd > s.confirmed {
		m.lagBytes.Set(float64(s.walEnd - s.confirmed))
	} else {
		m.lagBytes.Set(0)
	}
	if len(s.meta) > 0 {
		m.lagSeconds.Set(now.Sub(s.meta[0].at).Seconds())
	} else {
		m.lagSeconds.Set(0)
	}
}
