package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// Repairs: a copy of a missing message's outbox row, under its msg_id, and the
// record of it (idem_outbox_repairs).

type priorRepairs struct {
	count int
	last  int64 // ms
}

func (a *Auditor) repairsOf(ctx context.Context, ids []int64) (map[int64]priorRepairs, error) {
	out := map[int64]priorRepairs{}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	err := a.read.each(ctx, a.stmts.RepairsOf(len(ids)), args, func() { clear(out) }, func(rows idemsql.Rows) error {
		var id, count, last int64
		if err := rows.Scan(&id, &count, &last); err != nil {
			return err
		}
		out[id] = priorRepairs{int(count), last}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: reading past repairs (%s): %w", a.producerD, err)
	}
	return out, nil
}

// repair copies row rp.OrigID and records it, in one transaction; 0 when the
// row is not published (any more).
func (a *Auditor) repair(ctx context.Context, rp Repair) (copyID int64, err error) {
	at := rp.At.UnixMilli()
	err = a.inTx(ctx, func(q idemsql.Querier) error {
		copyID = 0
		// Another audit (idem audit --every beside an operator's repair) may be
		// repairing the same message: the row's lock makes them take turns, and
		// the second finds the first one's repair and leaves it.
		var locked int64
		if err := q.QueryRow(ctx, a.stmts.LockPublished, rp.OrigID).Scan(&locked); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return nil // no longer published (an operator, a cleanup): nothing to copy
			}
			return err
		}
		var orig, count, last int64
		switch err := q.QueryRow(ctx, a.stmts.RepairsOf(1), rp.OrigID).Scan(&orig, &count, &last); {
		case err == nil && (count >= int64(a.cfg.MaxRepairsPerMessage) || rp.At.Sub(time.UnixMilli(last)) < a.cfg.Grace):
			return nil // repaired meanwhile
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if a.stmts.LastInsertID != "" {
			n, err := q.Exec(ctx, a.stmts.RepairCopy, at, rp.OrigID)
			if err != nil || n == 0 {
				return err
			}
			if err := q.QueryRow(ctx, a.stmts.LastInsertID).Scan(&copyID); err != nil {
				return err
			}
		} else if err := q.QueryRow(ctx, a.stmts.RepairCopy, at, rp.OrigID).Scan(&copyID); err != nil {
			if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
				copyID = 0
				return nil
			}
			return err
		}
		_, err := q.Exec(ctx, a.stmts.RecordRepair, copyID, rp.OrigID, rp.MsgID, rp.Topic, strings.Join(rp.Consumers, ","), rp.Reason, at)
		return err
	})
	return copyID, err
}

// Repairs returns up to limit recorded repairs with copy ids below before (0 for
// the newest), newest first: what every run with Config.Repair republished.
func (a *Auditor) Repairs(ctx context.Context, before int64, limit int) ([]Repair, error) {
	return listRepairs(ctx, a.read, a.stmts, a.producerD, "audit.Auditor.Repairs limit", before, limit)
}

// ListRepairs is Auditor.Repairs without an Auditor: it reads the repairs
// recorded in producer's outbox, and nothing else.
func ListRepairs[Tx any](ctx context.Context, producer idemsql.TxDB[Tx], before int64, limit int) ([]Repair, error) {
	if err := producer.Validate(); err != nil {
		return nil, err
	}
	st := producer.Driver.Outbox()
	if st.Repairs == "" {
		return nil, &idem.InputError{Field: "audit.ListRepairs producer", Reason: fmt.Sprintf("the %s driver has no audit statements (OutboxSQL.Repairs)", producer.Dialect()),
			Fix: "use a driver that fills them: idempg, idemsqlite, idemmysql"}
	}
	return listRepairs(ctx, readerOf(producer), st, producer.Dialect().String(), "audit.ListRepairs limit", before, limit)
}

func listRepairs(ctx context.Context, read reader, st *idemsql.OutboxSQL,
	dialect, field string, before int64, limit int) ([]Repair, error) {
	if limit <= 0 || limit > MaxPageSize {
		return nil, &idem.InputError{Field: field, Reason: fmt.Sprintf("is %d", limit), Fix: fmt.Sprintf("give 1 to %d", MaxPageSize)}
	}
	if before <= 0 {
		before = math.MaxInt64
	}
	var out []Repair
	err := read.each(ctx, st.Repairs, []any{before, limit}, func() { out = out[:0] }, func(rows idemsql.Rows) error {
		var (
			r         Repair
			consumers string
			at        int64
		)
		if err := rows.Scan(&r.CopyID, &r.OrigID, &r.MsgID, &r.Topic, &consumers, &r.Reason, &at); err != nil {
			return err
		}
		r.Consumers, r.At = strings.Split(consumers, ","), time.UnixMilli(at)
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: reading the repairs (%s): %w", dialect, err)
	}
	return out, nil
}
