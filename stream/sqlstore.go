package stream

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/group"
	"github.com/idemhq/idem/migrate"
)

// SQLConfig configures a SQLStore. The zero value is usable.
type SQLConfig struct {
	// Now is the clock of event times and retention. Nil means time.Now.
	Now func() time.Time
	// ClientExpiry and MaxClients bound the clients Trim waits for; see
	// DefaultClientExpiry and DefaultMaxClients.
	ClientExpiry time.Duration
	MaxClients   int
	// SkipMigrate leaves the schema alone, for deployments that apply `idem migrate
	// print` with their own tool: NewSQLStore then only checks that the stream
	// tables are up to date, and fails with a *migrate.BehindError naming the missing
	// migration.
	SkipMigrate bool
}

// SQLStore keeps events in the tables idem_stream_events and idem_stream_heads of
// a SQLite, PostgreSQL or MySQL/MariaDB database, and each client's ack in
// idem_stream_clients (idem_stream_acks, from earlier versions, is no longer read).
// AppendTx appends in the caller's transaction, so an event exists if and only if
// the business write it reports commits.
//
// On MySQL, channels and client ids are keys of at most 255 bytes (Ack refuses a
// longer client id), and InnoDB may roll a transaction back to break a deadlock
// between appends and a concurrent Trim: Append, Ack and Trim then run their own
// transaction again, while AppendTx returns the error, which
// idemsql.IsSerializationFailure reports, for the caller to retry its transaction.
type SQLStore[Tx any] struct {
	db      idemsql.TxDB[Tx]
	sql     *idemsql.StreamSQL
	now     func() time.Time
	clients ClientBounds
	appends group.Batcher[appendCall]
	shared  atomic.Int64 // transactions that committed more than one Append, for tests
}

// NewSQLStore returns a store on db, creating or upgrading its tables (package
// migrate).
func NewSQLStore[Tx any](ctx context.Context, db idemsql.TxDB[Tx], cfg SQLConfig) (*SQLStore[Tx], error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	bounds, err := NewClientBounds(cfg.ClientExpiry, cfg.MaxClients)
	if err != nil {
		return nil, err
	}
	if err := migrate.Ensure(ctx, db, cfg.SkipMigrate, migrate.Stream); err != nil {
		return nil, err
	}
	s := &SQLStore[Tx]{db: db, sql: db.Driver.Stream(), now: cfg.Now, clients: bounds}
	runners := appendRunners
	if s.sql.OneWriter {
		runners = 1 // one writer at a time: more runners would wait on its lock
	}
	s.appends = group.Batcher[appendCall]{Runners: runners, Max: maxAppendBatch, Run: s.appendBatch}
	return s, nil
}

// appendRunners is how many append transactions run at once where the database
// takes more than one writer; further Appends queue and share the next transaction.
const appendRunners = 4

// maxAppendBatch bounds the events of one shared append transaction.
const maxAppendBatch = 256

// appendCall is one Append in a shared transaction.
type appendCall struct {
	channel string
	e       Event // the event asked for, then the event appended (or found by key)
}

// Append implements Store. Each call commits before it returns; concurrent calls
// share a transaction and its commit (a group commit: a call alone goes at once,
// calls arriving while transactions run wait for the next one), so the durable
// commits per event fall as the appends pile up. A call whose context ends while it
// waits returns the context's error, and its event may still be appended by the
// shared transaction, as it may be when a context ends during a commit.
func (s *SQLStore[Tx]) Append(ctx context.Context, channel string, e Event) (Event, error) {
	if err := ValidateAppend(channel, e); err != nil {
		return Event{}, err
	}
	it, err := s.appends.Do(ctx, appendCall{channel: channel, e: e})
	if err != nil {
		return Event{}, err
	}
	return it.Val.e, nil
}

// appendBatch appends a batch in one transaction. If it fails, each call runs
// again in a transaction of its own, so one call's error stays its own.
func (s *SQLStore[Tx]) appendBatch(batch []*group.Item[appendCall]) {
	ctx, cancel := group.Context(batch)
	defer cancel()
	// Channel by channel, each in arrival order: every shared transaction locks the
	// head rows in the same order, so two of them cannot deadlock.
	batch = slices.Clone(batch)
	slices.SortStableFunc(batch, func(a, b *group.Item[appendCall]) int { return strings.Compare(a.Val.channel, b.Val.channel) })
	out := make([]Event, len(batch))
	err := s.inTx(ctx, func(tx Tx) error {
		for i, it := range batch {
			e, err := s.AppendTx(ctx, tx, it.Val.channel, it.Val.e)
			if err != nil {
				return err
			}
			out[i] = e
		}
		return nil
	})
	if err == nil {
		if len(batch) > 1 {
			s.shared.Add(1)
		}
		for i, it := range batch {
			it.Val.e = out[i]
			it.Finish(nil)
		}
		return
	}
	if len(batch) == 1 {
		batch[0].Finish(err)
		return
	}
	for _, it := range batch {
		err := s.inTx(it.Ctx, func(tx Tx) (err error) {
			it.Val.e, err = s.AppendTx(it.Ctx, tx, it.Val.channel, it.Val.e)
			return err
		})
		it.Finish(err)
	}
}

// inTx runs fn in a transaction of its own, again if the database rolled it back
// to break a deadlock (InnoDB does, between appends and a Trim).
func (s *SQLStore[Tx]) inTx(ctx context.Context, fn func(tx Tx) error) error {
	return s.retry(ctx, s.db.InTx, fn)
}

// retry runs fn in a transaction of run's, as inTx does.
func (s *SQLStore[Tx]) retry(ctx context.Context, run func(context.Context, func(Tx) error) error, fn func(tx Tx) error) error {
	return idemsql.RetrySerializationFailures(ctx, func() error { return run(ctx, fn) })
}

// AppendTx appends e in the caller's transaction. The channel's head row is
// locked until the transaction ends, so seqs are assigned in commit order and a
// reader never sees seq N+1 before seq N.
func (s *SQLStore[Tx]) AppendTx(ctx context.Context, tx Tx, channel string, e Event) (Event, error) {
	if err := ValidateAppend(channel, e); err != nil {
		return Event{}, err
	}
	q := s.db.Querier(tx)
	if e.Key != "" {
		got, err := s.scan(q.QueryRow(ctx, s.sql.EventByKey, channel, e.Key))
		if err == nil {
			return got, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Event{}, wrap("append", err)
		}
	}
	head, err := s.nextSeq(ctx, q, channel)
	if err != nil {
		return Event{}, wrap("append", err)
	}
	e.Seq, e.At = uint64(head), s.now().UTC()
	var data any
	if len(e.Data) > 0 {
		data = []byte(e.Data)
	}
	if _, err := q.Exec(ctx, s.sql.InsertEvent, channel, head, e.Type, e.ID, data, e.Key, e.At.UnixNano()); err != nil {
		if e.Key != "" && isUniqueViolation(err) {
			err = keyRace{err}
		}
		return Event{}, wrap("append", err)
	}
	return e, nil
}

// keyRace is the error of an append that lost a race with a concurrent transaction
// appending the same key (both looked the key up before either committed). It
// reports itself as a serialization failure (idemsql.IsSerializationFailure), since
// running the transaction again finds the key: Append and Store's other writers do,
// and a caller of AppendTx retrying its transaction on serialization failures does.
type keyRace struct{ err error }

func (k keyRace) Error() string {
	return "the event's key was appended by a concurrent transaction (run the transaction again): " + k.err.Error()
}
func (k keyRace) Unwrap() error    { return k.err }
func (k keyRace) SQLState() string { return "40001" }

// isUniqueViolation reports a unique index's refusal on PostgreSQL (SQLSTATE 23505)
// or MySQL (error 1062). SQLite cannot race: its one writer holds the lock from BEGIN.
func isUniqueViolation(err error) bool {
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		return coded.SQLState() == "23505"
	}
	return strings.Contains(err.Error(), "Error 1062 (23000)")
}

// nextSeq advances channel's head and returns it, holding the head row's lock.
func (s *SQLStore[Tx]) nextSeq(ctx context.Context, q idemsql.Querier, channel string) (int64, error) {
	var head int64
	if s.sql.NextHeadRead == "" {
		err := q.QueryRow(ctx, s.sql.NextHead, channel).Scan(&head)
		return head, err
	}
	if _, err := q.Exec(ctx, s.sql.NextHead, channel); err != nil {
		return 0, err
	}
	err := q.QueryRow(ctx, s.sql.NextHeadRead).Scan(&head)
	return head, err
}

func (s *SQLStore[Tx]) scan(row idemsql.Row) (Event, error) {
	var e Event
	var seq, at int64
	var data []byte
	if err := row.Scan(&seq, &e.Type, &e.ID, &data, &at); err != nil {
		return e, err
	}
	e.Seq, e.At = uint64(seq), time.Unix(0, at).UTC()
	if len(data) > 0 {
		e.Data = data
	}
	return e, nil
}

// Read implements Store. It returns ErrTrimmed when the first event after since
// is gone.
func (s *SQLStore[Tx]) Read(ctx context.Context, channel string, since uint64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	var out []Event
	err := s.db.InTx(ctx, func(tx Tx) error {
		rows, err := s.db.Querier(tx).Query(ctx, s.sql.ReadEvents, channel, int64(since), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := s.scan(rows)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, wrap("read", err)
	}
	return CheckTrimmed(ctx, s.Head, channel, since, out)
}

// Head implements Store.
func (s *SQLStore[Tx]) Head(ctx context.Context, channel string) (uint64, error) {
	var head int64
	err := s.db.InTx(ctx, func(tx Tx) error {
		return s.db.Querier(tx).QueryRow(ctx, s.sql.Head, channel).Scan(&head)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, wrap("head", err)
	}
	return uint64(head), nil
}

// Ack implements Store; an ack below the client's previous one only marks the
// client as seen.
func (s *SQLStore[Tx]) Ack(ctx context.Context, channel, client string, seq uint64) error {
	if seq > MaxSeq {
		return &idem.InputError{Field: "seq", Reason: fmt.Sprintf("is %d", seq), Fix: fmt.Sprintf("ack a seq up to %d", uint64(MaxSeq))}
	}
	if err := s.checkKeys(channel, client); err != nil {
		return err
	}
	return wrap("ack", s.inTx(ctx, func(tx Tx) error {
		_, err := s.db.Querier(tx).Exec(ctx, s.sql.Ack, channel, client, int64(seq), s.now().UnixNano())
		return err
	}))
}

// checkKeys refuses a channel or client id longer than the database keeps as a
// key (StreamSQL.MaxKey), rather than let it refuse or truncate it.
func (s *SQLStore[Tx]) checkKeys(channel, client string) error {
	switch {
	case s.sql.MaxKey == 0:
		return nil
	case len(client) > s.sql.MaxKey:
		return &idem.InputError{Field: "client", Reason: fmt.Sprintf("is %d bytes", len(client)),
			Fix: fmt.Sprintf("keep it under %d bytes (a UUID is 36)", s.sql.MaxKey)}
	case len(channel) > MaxChannel:
		return validateChannel(channel)
	}
	return nil
}

// Trim implements Store: it forgets clients not seen for ClientExpiry and all
// but the MaxClients most recently seen of each channel, then deletes events
// older than retention and events at or below the lowest ack of their
// channel's clients.
func (s *SQLStore[Tx]) Trim(ctx context.Context, retention time.Duration) (int, error) {
	var n int64
	now := s.now()
	// READ COMMITTED where the TxDB offers it (MySQL): InnoDB's default REPEATABLE
	// READ would lock the gaps the deletes scan and hold appends back meanwhile.
	err := s.retry(ctx, s.db.InTxReadCommitted, func(tx Tx) error {
		q := s.db.Querier(tx)
		if _, err := q.Exec(ctx, s.sql.ForgetIdleClients, now.Add(-s.clients.Expiry).UnixNano()); err != nil {
			return err
		}
		if _, err := q.Exec(ctx, s.sql.ForgetExtraClients, s.clients.Max); err != nil {
			return err
		}
		a, err := q.Exec(ctx, s.sql.TrimOld, now.Add(-retention).UnixNano())
		if err != nil {
			return err
		}
		b, err := q.Exec(ctx, s.sql.TrimAcked)
		n = a + b
		return err
	})
	return int(n), wrap("trim", err)
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var ie *idem.InputError
	if errors.As(err, &ie) {
		return err
	}
	return &idem.BackendError{Backend: "stream", Op: op, Err: err}
}
