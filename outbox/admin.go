package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/rowscan"
)

// Bounds on what an operator passes in.
const (
	// MaxListLimit bounds the limit of Admin.Parked.
	MaxListLimit = 1000
	// MaxReasonBytes bounds the reason of Admin.Discard.
	MaxReasonBytes = 1024
)

// Admin is the operator's view of an outbox: its backlog per topic and partition,
// its parked messages (retried or discarded on demand) and the relays at work. It
// needs the database alone, so tools in other processes (the admin API, `idem
// outbox`) can use it; the schema must be up to date (New, or `idem migrate up`).
type Admin[Tx any] struct {
	db  idemsql.TxDB[Tx]
	now func() time.Time
}

// NewAdmin returns the admin of db's outbox.
func NewAdmin[Tx any](db idemsql.TxDB[Tx]) *Admin[Tx] {
	return &Admin[Tx]{db: db, now: time.Now}
}

// Status is the outbox at a glance.
type Status struct {
	// Partitions holds each topic and partition with unpublished messages, by topic
	// then partition.
	Partitions []PartitionStatus
	// Totals over Partitions; OldestAge is the oldest waiting message's.
	Unpublished, Parked, Discarded int64
	OldestAge                      time.Duration
	// Relays are the relay instances at work, and those that stopped reporting
	// within the last hour (Stale): a relay stopped cleanly removes itself, and one
	// that died is forgotten an hour after it turned stale. At most maxRelays.
	Relays []RelayInstance
}

// PartitionStatus is the backlog of one topic in one ordering partition.
type PartitionStatus struct {
	Topic       string
	Partition   int
	Unpublished int64         // waiting to be published (parked ones excluded)
	OldestAge   time.Duration // age of the oldest of them; 0 when none
	Parked      int64         // parked and not discarded: waiting for Retry
	Discarded   int64         // parked and discarded: kept for audit, never published
}

// RelayInstance is what a Relay last reported (at most once a second, after a round).
type RelayInstance struct {
	Instance       string // RelayConfig.Instance
	Host           string
	PID            int64
	StartedAt      time.Time
	LastRoundAt    time.Time
	PollInterval   time.Duration
	PublishedTotal int64  // messages this instance marked published since it started
	LastError      string // the last round's error; "" when it succeeded
	// Stale says the relay has not reported for 3 poll intervals or 30 s, whichever
	// is longer: it stopped, hangs, or cannot reach the database.
	Stale bool
}

// Status returns the backlog per topic and partition and the relay instances. The
// counts read the index idem_outbox_backlog, which holds only unpublished rows.
func (a *Admin[Tx]) Status(ctx context.Context) (Status, error) {
	var st Status
	now := a.now()
	err := read(ctx, a.db, func(q idemsql.Querier) error {
		st = Status{}
		rows, err := q.Query(ctx, `SELECT topic, part, COUNT(CASE WHEN parked_at IS NULL THEN 1 END),
			COUNT(CASE WHEN parked_at IS NOT NULL THEN 1 END), MIN(CASE WHEN parked_at IS NULL THEN created_at END)
			FROM idem_outbox WHERE published_at IS NULL GROUP BY topic, part ORDER BY topic, part`)
		if err != nil {
			return err
		}
		index := map[string]int{}
		for rows.Next() {
			var p PartitionStatus
			var oldest *int64
			if err := rows.Scan(&p.Topic, &p.Partition, &p.Unpublished, &p.Parked, &oldest); err != nil {
				rows.Close()
				return err
			}
			if oldest != nil {
				p.OldestAge = max(now.Sub(time.UnixMilli(*oldest)), 0)
			}
			index[fmt.Sprint(p.Topic, "\x00", p.Partition)] = len(st.Partitions)
			st.Partitions = append(st.Partitions, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		// Discarded messages are parked ones with a row in idem_outbox_discarded: few.
		rows, err = q.Query(ctx, `SELECT o.topic, o.part, COUNT(*) FROM idem_outbox_discarded x
			JOIN idem_outbox o ON o.id = x.id WHERE o.published_at IS NULL GROUP BY o.topic, o.part`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var topic string
			var part int
			var n int64
			if err := rows.Scan(&topic, &part, &n); err != nil {
				rows.Close()
				return err
			}
			if i, ok := index[fmt.Sprint(topic, "\x00", part)]; ok {
				// max: the reads share no snapshot outside a transaction (SQLite)
				st.Partitions[i].Discarded, st.Partitions[i].Parked = n, max(st.Partitions[i].Parked-n, 0)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		st.Relays, err = relayInstances(ctx, q, now)
		return err
	})
	if err != nil {
		return Status{}, &idem.BackendError{Backend: a.db.Dialect().String(), Op: "outbox.status", Err: err}
	}
	for _, p := range st.Partitions {
		st.Unpublished += p.Unpublished
		st.Parked += p.Parked
		st.Discarded += p.Discarded
		st.OldestAge = max(st.OldestAge, p.OldestAge)
	}
	return st, nil
}

// staleAfter is how long a relay may be silent before Status calls it stale.
func staleAfter(poll time.Duration) time.Duration { return max(3*poll, 30*time.Second) }

// staleAtSQL is staleAfter in SQL: when a relay's row turns stale, in Unix
// milliseconds.
const staleAtSQL = `last_round_at + CASE WHEN 3 * poll_interval_ms > 30000 THEN 3 * poll_interval_ms ELSE 30000 END`

// maxRelays bounds the relay instances Status lists.
const maxRelays = 1000

func relayInstances(ctx context.Context, q idemsql.Querier, now time.Time) ([]RelayInstance, error) {
	rows, err := q.Query(ctx, `SELECT instance, host, pid, started_at, last_round_at, poll_interval_ms, published_total, last_error
		FROM idem_outbox_relays WHERE `+staleAtSQL+` >= $1 ORDER BY instance LIMIT $2`, now.Add(-relayForgetAfter).UnixMilli(), maxRelays)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []RelayInstance
	for rows.Next() {
		var r RelayInstance
		var started, last, poll int64
		if err := rows.Scan(&r.Instance, &r.Host, &r.PID, &started, &last, &poll, &r.PublishedTotal, &r.LastError); err != nil {
			return nil, err
		}
		r.StartedAt, r.LastRoundAt, r.PollInterval = time.UnixMilli(started), time.UnixMilli(last), time.Duration(poll)*time.Millisecond
		r.Stale = now.Sub(r.LastRoundAt) > staleAfter(r.PollInterval)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Parked returns up to limit (1 to MaxListLimit; 0 means 100) parked messages with
// ids above afterID, in id order, discarded ones included (with DiscardedAt and
// DiscardReason): pass the last id as afterID for the next page. A message whose
// row cannot be decoded is listed with its DecodeError.
func (a *Admin[Tx]) Parked(ctx context.Context, afterID int64, limit int) ([]Parked, error) {
	switch {
	case limit < 0 || limit > MaxListLimit:
		return nil, &idem.InputError{Field: "limit", Reason: fmt.Sprintf("must be 0 to %d (got %d)", MaxListLimit, limit),
			Fix: "page with afterID instead of asking for more at once"}
	case limit == 0:
		limit = 100
	}
	return listParked(ctx, a.db, "AND o.id > $1 ORDER BY o.id LIMIT $2", afterID, limit)
}

// Retry puts parked message id back in line, with its attempts reset, as
// Outbox.Retry does; a running relay publishes it at its next round. A message the
// log-based relay parked (ParkTx) goes back in line as a new row with a new id,
// since that relay reads inserts only. It returns ErrNotParked for an id that is not
// parked, or was discarded.
func (a *Admin[Tx]) Retry(ctx context.Context, id int64) error {
	return retry(ctx, a.db, a.now, id)
}

// Discard gives up on parked message id for good: it is never published and stays,
// with reason (required), in Parked and Status. It returns ErrNotParked for an id
// that is not parked, or was discarded already.
func (a *Admin[Tx]) Discard(ctx context.Context, id int64, reason string) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return &idem.InputError{Field: "reason", Reason: "is empty", Fix: "say why the message is dropped: it is kept for audit"}
	case len(reason) > MaxReasonBytes:
		return &idem.InputError{Field: "reason", Reason: fmt.Sprintf("is longer than %d bytes (got %d)", MaxReasonBytes, len(reason)),
			Fix: "keep it to a sentence; link to a ticket for more"}
	}
	conflict := " ON CONFLICT (id) DO NOTHING"
	if a.db.Dialect() == idemsql.MySQL {
		conflict = " ON DUPLICATE KEY UPDATE id = id"
	}
	err := a.db.InTx(ctx, func(tx Tx) error {
		q := a.db.Querier(tx)
		if err := lockParked(ctx, a.db.Dialect(), q, id); err != nil {
			return err
		}
		n, err := q.Exec(ctx, "INSERT INTO idem_outbox_discarded (id, discarded_at, reason) VALUES ($1, $2, $3)"+conflict,
			id, a.now().UnixMilli(), reason)
		if err == nil && n == 0 {
			return ErrNotParked // discarded already
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrNotParked) {
		return &idem.BackendError{Backend: a.db.Dialect().String(), Op: "outbox.discard", Err: err}
	}
	return err
}

// lockParked locks the row of parked message id (on PostgreSQL and MySQL; a SQLite
// transaction holds the write lock already), or returns ErrNotParked. Retry and
// Discard both take it first, so one of two racing calls sees the other's commit.
func lockParked(ctx context.Context, d idemsql.Dialect, q idemsql.Querier, id int64) error {
	lock := " FOR UPDATE"
	if d == idemsql.SQLite {
		lock = ""
	}
	var got int64
	err := q.QueryRow(ctx, "SELECT id FROM idem_outbox WHERE id = $1 AND parked_at IS NOT NULL AND published_at IS NULL"+lock, id).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
		return ErrNotParked
	}
	return err
}

// retry is Outbox.Retry and Admin.Retry.
func retry[Tx any](ctx context.Context, db idemsql.TxDB[Tx], now func() time.Time, id int64) error {
	err := db.InTx(ctx, func(tx Tx) error {
		q := db.Querier(tx)
		if err := lockParked(ctx, db.Dialect(), q, id); err != nil {
			return err
		}
		var discarded int64
		if err := q.QueryRow(ctx, "SELECT COUNT(*) FROM idem_outbox_discarded WHERE id = $1", id).Scan(&discarded); err != nil {
			return err
		}
		if discarded > 0 {
			return ErrNotParked
		}
		if cdc, err := parkedByCDC(ctx, q, id); err != nil || cdc {
			if err != nil {
				return err
			}
			return reinsert(ctx, q, id, now().UnixMilli())
		}
		_, err := q.Exec(ctx, `UPDATE idem_outbox SET parked_at = NULL, attempts = 0, available_at = $1 WHERE id = $2`,
			now().UnixMilli(), id)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotParked) {
		return &idem.BackendError{Backend: db.Dialect().String(), Op: "outbox.retry", Err: err}
	}
	return err
}

// parkedColumns names the columns listParked reads, for decode errors.
var parkedColumns = []string{"id", "msg_id", "topic", "ordering_key", "headers", "payload", "attempts", "last_error",
	"parked_at", "discarded_at", "discard_reason"}

// listParked returns the parked messages that more (conditions on o, then ORDER BY
// and LIMIT) selects, with their discard. A row that cannot be decoded is listed
// with its DecodeError: one bad row must not hide the others from the operator.
func listParked[Tx any](ctx context.Context, db idemsql.TxDB[Tx], more string, args ...any) ([]Parked, error) {
	var out []Parked
	err := read(ctx, db, func(q idemsql.Querier) error {
		out = nil
		rows, err := q.Query(ctx, `SELECT o.id, o.msg_id, o.topic, o.ordering_key, o.headers, o.payload,
			o.attempts, o.last_error, o.parked_at, x.discarded_at, COALESCE(x.reason, '')
			FROM idem_outbox o LEFT JOIN idem_outbox_discarded x ON x.id = o.id
			WHERE o.parked_at IS NOT NULL AND o.published_at IS NULL `+more, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p Parked
			var headers string
			var at int64
			var discarded *int64
			bad, err := rowscan.Scan(rows, parkedColumns, &p.ID, &p.Message.ID, &p.Message.Topic, &p.Message.OrderingKey,
				&headers, &p.Message.Payload, &p.Attempts, &p.LastError, &at, &discarded, &p.DiscardReason)
			if err != nil {
				return err
			}
			p.DecodeError = rowscan.Join(bad, rowscan.JSON("headers", headers, &p.Message.Headers, "a JSON object of strings"))
			p.ParkedAt = time.UnixMilli(at)
			if discarded != nil {
				p.DiscardedAt = time.UnixMilli(*discarded)
			}
			out = append(out, p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: db.Dialect().String(), Op: "outbox.parked", Err: err}
	}
	return out, nil
}

// read runs fn outside a transaction where db can (on SQLite a transaction would
// take the write lock), and in one otherwise.
func read[Tx any](ctx context.Context, db idemsql.TxDB[Tx], fn func(q idemsql.Querier) error) error {
	if db.Read != nil {
		return db.Read(ctx, fn)
	}
	return db.InTx(ctx, func(tx Tx) error { return fn(db.Querier(tx)) })
}
