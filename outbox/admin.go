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
	db    idemsql.TxDB[Tx]
	stmts *idemsql.OutboxSQL // db's, fetched once
	bad   error              // db.Validate's complaint, which every method returns
	now   func() time.Time
}

// NewAdmin returns the admin of db's outbox. A db that is not valid (see
// TxDB.Validate) makes every method return why.
func NewAdmin[Tx any](db idemsql.TxDB[Tx]) *Admin[Tx] {
	a := &Admin[Tx]{db: db, bad: db.Validate(), now: time.Now}
	if a.bad == nil {
		a.stmts = db.Driver.Outbox()
	}
	return a
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
	if a.bad != nil {
		return Status{}, a.bad
	}
	var st Status
	now := a.now()
	err := read(ctx, a.db, func(q idemsql.Querier) (err error) {
		st = Status{}
		st.Partitions, err = idemsql.Collect(ctx, q, a.stmts.StatusPartitions, nil, func(rs idemsql.Rows) (p PartitionStatus, err error) {
			var oldest *int64
			err = rs.Scan(&p.Topic, &p.Partition, &p.Unpublished, &p.Parked, &oldest)
			if oldest != nil {
				p.OldestAge = max(now.Sub(time.UnixMilli(*oldest)), 0)
			}
			return p, err
		})
		if err != nil {
			return err
		}
		discarded, err := idemsql.Collect(ctx, q, a.stmts.StatusDiscarded, nil, func(rs idemsql.Rows) (p PartitionStatus, err error) {
			return p, rs.Scan(&p.Topic, &p.Partition, &p.Discarded)
		})
		if err != nil {
			return err
		}
		addDiscarded(st.Partitions, discarded)
		st.Relays, err = relayInstances(ctx, q, a.stmts.ListRelays, now)
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

// addDiscarded moves the discarded messages of each topic and partition (Discarded
// of discarded's) out of Parked of parts, into its Discarded. Discarded messages
// are parked ones with a row in idem_outbox_discarded: few.
func addDiscarded(parts, discarded []PartitionStatus) {
	index := make(map[string]int, len(parts))
	for i, p := range parts {
		index[fmt.Sprint(p.Topic, "\x00", p.Partition)] = i
	}
	for _, d := range discarded {
		if i, ok := index[fmt.Sprint(d.Topic, "\x00", d.Partition)]; ok {
			// max: the reads share no snapshot outside a transaction (SQLite)
			parts[i].Discarded, parts[i].Parked = d.Discarded, max(parts[i].Parked-d.Discarded, 0)
		}
	}
}

// staleAfter is how long a relay may be silent before Status calls it stale
// (OutboxSQL.ListRelays says it in SQL).
func staleAfter(poll time.Duration) time.Duration { return max(3*poll, 30*time.Second) }

// maxRelays bounds the relay instances Status lists.
const maxRelays = 1000

// relayInstances reads the relay instances with query (ListRelays).
func relayInstances(ctx context.Context, q idemsql.Querier, query string, now time.Time) ([]RelayInstance, error) {
	return idemsql.Collect(ctx, q, query, []any{now.Add(-relayForgetAfter).UnixMilli(), maxRelays}, func(rs idemsql.Rows) (r RelayInstance, err error) {
		var started, last, poll int64
		if err := rs.Scan(&r.Instance, &r.Host, &r.PID, &started, &last, &poll, &r.PublishedTotal, &r.LastError); err != nil {
			return r, err
		}
		r.StartedAt, r.LastRoundAt, r.PollInterval = time.UnixMilli(started), time.UnixMilli(last), time.Duration(poll)*time.Millisecond
		r.Stale = now.Sub(r.LastRoundAt) > staleAfter(r.PollInterval)
		return r, nil
	})
}

// Parked returns up to limit (1 to MaxListLimit; 0 means 100) parked messages with
// ids above afterID, in id order, discarded ones included (with DiscardedAt and
// DiscardReason): pass the last id as afterID for the next page. A message whose
// row cannot be decoded is listed with its DecodeError.
func (a *Admin[Tx]) Parked(ctx context.Context, afterID int64, limit int) ([]Parked, error) {
	switch {
	case a.bad != nil:
		return nil, a.bad
	case limit < 0 || limit > MaxListLimit:
		return nil, &idem.InputError{Field: "limit", Reason: fmt.Sprintf("must be 0 to %d (got %d)", MaxListLimit, limit),
			Fix: "page with afterID instead of asking for more at once"}
	case limit == 0:
		limit = 100
	}
	return listParked(ctx, a.db, a.stmts.ParkedAfter, afterID, limit)
}

// Retry puts parked message id back in line, with its attempts reset, as
// Outbox.Retry does; a running relay publishes it at its next round. A message the
// log-based relay parked (ParkTx) goes back in line as a new row with a new id,
// since that relay reads inserts only. It returns ErrNotParked for an id that is not
// parked, or was discarded.
func (a *Admin[Tx]) Retry(ctx context.Context, id int64) error {
	if a.bad != nil {
		return a.bad
	}
	return retry(ctx, a.db, a.stmts, a.now, id)
}

// Discard gives up on parked message id for good: it is never published and stays,
// with reason (required), in Parked and Status. It returns ErrNotParked for an id
// that is not parked, or was discarded already.
func (a *Admin[Tx]) Discard(ctx context.Context, id int64, reason string) error {
	switch {
	case a.bad != nil:
		return a.bad
	case strings.TrimSpace(reason) == "":
		return &idem.InputError{Field: "reason", Reason: "is empty", Fix: "say why the message is dropped: it is kept for audit"}
	case len(reason) > MaxReasonBytes:
		return &idem.InputError{Field: "reason", Reason: fmt.Sprintf("is longer than %d bytes (got %d)", MaxReasonBytes, len(reason)),
			Fix: "keep it to a sentence; link to a ticket for more"}
	}
	err := a.db.InTx(ctx, func(tx Tx) error {
		q := a.db.Querier(tx)
		if err := lockParked(ctx, a.stmts, q, id); err != nil {
			return err
		}
		n, err := q.Exec(ctx, a.stmts.Discard, id, a.now().UnixMilli(), reason)
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

// lockParked locks the row of parked message id (LockParked), or returns
// ErrNotParked. Retry and Discard both take it first, so one of two racing calls
// sees the other's commit.
func lockParked(ctx context.Context, s *idemsql.OutboxSQL, q idemsql.Querier, id int64) error {
	var got int64
	err := q.QueryRow(ctx, s.LockParked, id).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
		return ErrNotParked
	}
	return err
}

// retry is Outbox.Retry and Admin.Retry.
func retry[Tx any](ctx context.Context, db idemsql.TxDB[Tx], s *idemsql.OutboxSQL, now func() time.Time, id int64) error {
	err := db.InTx(ctx, func(tx Tx) error {
		q := db.Querier(tx)
		if err := lockParked(ctx, s, q, id); err != nil {
			return err
		}
		if discarded, err := count(ctx, q, s.Discarded, id); err != nil || discarded > 0 {
			if err != nil {
				return err
			}
			return ErrNotParked
		}
		if cdc, err := count(ctx, q, s.CDCParked, id); err != nil || cdc > 0 {
			if err != nil {
				return err
			}
			return reinsert(ctx, s, q, id, now().UnixMilli())
		}
		_, err := q.Exec(ctx, s.Retry, now().UnixMilli(), id)
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

// listParked returns the parked messages that query (ParkedPending, ParkedAfter)
// reads, with their discard. A row that cannot be decoded is listed with its
// DecodeError: one bad row must not hide the others from the operator.
func listParked[Tx any](ctx context.Context, db idemsql.TxDB[Tx], query string, args ...any) ([]Parked, error) {
	var out []Parked
	err := read(ctx, db, func(q idemsql.Querier) (err error) {
		out, err = idemsql.Collect(ctx, q, query, args, scanParked)
		return err
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: db.Dialect().String(), Op: "outbox.parked", Err: err}
	}
	return out, nil
}

// scanParked reads a parked message; a value it cannot decode is its DecodeError.
func scanParked(rows idemsql.Rows) (p Parked, err error) {
	var headers string
	var at int64
	var discarded *int64
	bad, err := rowscan.Scan(rows, parkedColumns, &p.ID, &p.Message.ID, &p.Message.Topic, &p.Message.OrderingKey,
		&headers, &p.Message.Payload, &p.Attempts, &p.LastError, &at, &discarded, &p.DiscardReason)
	if err != nil {
		return p, err
	}
	p.DecodeError = rowscan.Join(bad, rowscan.JSON("headers", headers, &p.Message.Headers, "a JSON object of strings"))
	p.ParkedAt = time.UnixMilli(at)
	if discarded != nil {
		p.DiscardedAt = time.UnixMilli(*discarded)
	}
	return p, nil
}

// count reads the one number query returns for id.
func count(ctx context.Context, q idemsql.Querier, query string, id int64) (n int64, err error) {
	return n, q.QueryRow(ctx, query, id).Scan(&n)
}

// read runs fn outside a transaction where db can (on SQLite a transaction would
// take the write lock), and in one otherwise.
func read[Tx any](ctx context.Context, db idemsql.TxDB[Tx], fn func(q idemsql.Querier) error) error {
	if db.Read != nil {
		return db.Read(ctx, fn)
	}
	return db.InTx(ctx, func(tx Tx) error { return fn(db.Querier(tx)) })
}
