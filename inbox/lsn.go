package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// The position headers a CDC relay (idempg/pgcdc) sets on every message; the same
// names as pgcdc.HeaderSource, HeaderLSN and HeaderIndex.
const (
	headerSource = "idem-source"
	headerLSN    = "idem-lsn"
	headerIndex  = "idem-lsn-index"
)

// LSNTracker keeps, per source (one PostgreSQL log read by one slot), the highest
// position applied: {commit LSN, index in the transaction}. It is one row of
// idem_sequences per source (epoch = commit LSN, next = index + 1), written in the
// effect's transaction, so the state stays the same size however many messages flow.
type LSNTracker[Tx any] struct {
	db    idemsql.TxDB[Tx]
	sql   *idemsql.InboxSQL
	scope string
}

// LSNConfig configures an LSNTracker. The zero value is usable.
type LSNConfig struct {
	// Scope names whose watermarks these are, usually the consumer; consumers of one
	// source keep separate watermarks under separate scopes. Default "lsn".
	Scope string
	// SkipMigrate leaves the schema alone (see idemseq.Config.SkipMigrate).
	SkipMigrate bool
}

// NewLSNTracker returns a tracker on db, creating idem_sequences if missing.
func NewLSNTracker[Tx any](ctx context.Context, db idemsql.TxDB[Tx], cfg LSNConfig) (*LSNTracker[Tx], error) {
	if cfg.Scope == "" {
		cfg.Scope = "lsn"
	}
	if err := (idem.Key{Scope: cfg.Scope, ID: "x"}).Validate(); err != nil {
		return nil, err
	}
	if err := db.Validate(); err != nil {
		return nil, err
	}
	if err := migrate.Ensure(ctx, db, cfg.SkipMigrate, migrate.Sequences); err != nil {
		return nil, err
	}
	return &LSNTracker[Tx]{db: db, sql: db.Driver.Inbox(), scope: cfg.Scope}, nil
}

// CheckTx records position {lsn, index} of source in tx: Accepted when it is above
// the source's watermark (which moves to it), Duplicate at or below it. Checks of
// one source serialize on its row until the first transaction ends.
func (t *LSNTracker[Tx]) CheckTx(ctx context.Context, tx Tx, source string, lsn, index uint64) (idemseq.Verdict, error) {
	if source == "" || len(source) > 255 {
		return 0, &idem.InputError{Field: "source", Reason: fmt.Sprintf("must be 1 to 255 bytes (got %d)", len(source)), Fix: "set pgcdc.Config.Source to a short name"}
	}
	if lsn == 0 || lsn > 1<<63-1 || index >= 1<<32 {
		return 0, &idem.InputError{Field: "position", Reason: fmt.Sprintf("%d/%d is out of range", lsn, index), Fix: "pass the commit LSN and index of a CDC relay's message"}
	}
	v, err := t.check(ctx, t.db.Querier(tx), source, int64(lsn), int64(index))
	if err != nil {
		return 0, &idem.BackendError{Backend: t.db.Dialect().String(), Op: "lsn.check", Err: err}
	}
	return v, nil
}

// check stores the watermark {lsn, index} as epoch = lsn, next = index + 1, in one
// statement where the driver has it (InboxSQL.LSNAdvance), which locks the
// source's row: a row returned means Accepted.
func (t *LSNTracker[Tx]) check(ctx context.Context, q idemsql.Querier, source string, lsn, index int64) (idemseq.Verdict, error) {
	if t.sql.LSNAdvance == "" {
		return t.checkLocked(ctx, q, source, lsn, index)
	}
	var one int
	err := q.QueryRow(ctx, t.sql.LSNAdvance, t.scope, source, lsn, index+1).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
		return idemseq.Duplicate, nil
	}
	return idemseq.Accepted, err
}

// checkLocked is check in three statements: lock the source's row (a fresh row is
// {0, 0}, below every position), then compare and update.
func (t *LSNTracker[Tx]) checkLocked(ctx context.Context, q idemsql.Querier, source string, lsn, index int64) (idemseq.Verdict, error) {
	var e, n int64
	if _, err := q.Exec(ctx, t.sql.LSNEnsure, t.scope, source); err != nil {
		return 0, err
	}
	if err := q.QueryRow(ctx, t.sql.LSNLock, t.scope, source).Scan(&e, &n); err != nil {
		return 0, err
	}
	if e > lsn || (e == lsn && n > index) {
		return idemseq.Duplicate, nil
	}
	_, err := q.Exec(ctx, t.sql.LSNSet, t.scope, source, lsn, index+1)
	return idemseq.Accepted, err
}

// Watermark returns source's watermark: the position of the last message applied,
// ok false before the first.
func (t *LSNTracker[Tx]) Watermark(ctx context.Context, source string) (lsn, index uint64, ok bool, err error) {
	var e, n int64
	err = t.db.InTx(ctx, func(tx Tx) error {
		return t.db.Querier(tx).QueryRow(ctx, t.sql.LSNWatermark, t.scope, source).Scan(&e, &n)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil || n == 0 {
		return 0, 0, false, err
	}
	return uint64(e), uint64(n - 1), true, nil
}

// lsnSeqs adapts an LSNTracker to SeqTracker: epoch is the commit LSN, seq the index.
type lsnSeqs[Tx any] struct{ t *LSNTracker[Tx] }

func (a lsnSeqs[Tx]) CheckTx(ctx context.Context, tx Tx, producer string, epoch, seq uint64) (idemseq.Verdict, error) {
	return a.t.CheckTx(ctx, tx, producer, epoch, seq)
}

// WithLSN deduplicates messages of a CDC relay (idempg/pgcdc) by their position in
// the PostgreSQL log instead of by key: a watermark per source in the effect's
// transaction, one row however many messages, and no key records to sweep. A relay
// restarted between publishing and confirming republishes from the slot's confirmed
// position; those copies sit at or below the watermark and are acknowledged without
// running the handler. Messages without position headers are deduplicated by key.
//
// The watermark is exact when one source's messages are applied in the order the
// relay published them (commit order), which a single consumer of a JetStream
// stream or a Kafka partition does when a failed message is retried before later
// ones (inbox.Config BatchSize 1, or a broker consumer with one message in flight).
// A consumer that applies a later position while an earlier one is still being
// retried would take the earlier one for a copy: keep key dedup there.
//
// So WithLSN runs one message per transaction: Config.BatchSize 0 becomes 1 and a
// larger one is refused. In a batch, a message retried while later ones commit
// would come back below the watermark. The broker must then redeliver in order too,
// with one message in flight per source (JetStream MaxAckPending 1, or one Kafka
// partition's consumer).
func WithLSN[Tx any](t *LSNTracker[Tx]) Option[Tx] {
	seqs := WithSequences[Tx](lsnSeqs[Tx]{t}, LSNPosition)
	return func(c *Consumer[Tx]) {
		seqs(c)
		c.oneByOne = true
	}
}

// LSNPosition is the SeqFunc of WithLSN: producer = the idem-source header, epoch =
// the commit LSN of idem-lsn ("16/B374D848"), seq = idem-lsn-index.
func LSNPosition(d idem.Delivery) (source string, lsn, index uint64, ok bool) {
	source = d.Headers[headerSource]
	hi, lo, found := strings.Cut(d.Headers[headerLSN], "/")
	if source == "" || !found {
		return "", 0, 0, false
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	i, err3 := strconv.ParseUint(d.Headers[headerIndex], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil || h<<32|l == 0 {
		return "", 0, 0, false
	}
	return source, h<<32 | l, i, true
}
