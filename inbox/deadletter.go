package inbox

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/rowscan"
	"github.com/idemhq/idem/internal/sqltext"
)

// DeadLetter is a message the consumer gave up on, with why and when. Nothing is
// dropped: every message is either applied, a duplicate, or here.
type DeadLetter struct {
	ID       int64 // row id, for Replay
	Consumer string
	Message  idem.Message
	Position string // where it was in the broker
	Reason   string
	Kind     string // permanent, max_attempts, no_key, key_reused, or a refusal: stale_key, future_key, untimed_key, deadline, bad_deadline
	Attempts int
	FirstAt  time.Time // the first failure this process saw (or DeadAt)
	DeadAt   time.Time

	// The operator's part (DeadLetterAdmin); zero until an operator acted.
	State             string    // StatePending, StateReplayRequested, StateReplayed or StateDiscarded
	ReplayRequestedAt time.Time // while a requested replay waits for its consumer
	ReplayReason      string    // the reason given with the request
	ReplayAttempts    int       // failed tries of the requested replay
	LastReplayError   string    // the last one's error, or why the consumer gave up
	ReplayNote        string    // "applied", or "already applied" (the handler did not run)
	ReplayedAt        time.Time
	DiscardedAt       time.Time
	DiscardReason     string

	// DecodeError says what of the stored row could not be decoded, "" when all of
	// it was: headers that are not a JSON object of strings (a row another service
	// wrote), or on SQLite a column holding a value of another type. The fields it
	// names hold what could be read. Such a letter is listed and shown, and can be
	// discarded, but not replayed until its row is corrected.
	DecodeError string
}

// What a dead letter keeps of text idem did not write: a producer's message id,
// topic and position, and a handler's error. A row holding that text verbatim
// could fail to be written (PostgreSQL refuses NUL and invalid UTF-8, and an index
// entry over about 2.7 kB; MariaDB refuses text longer than its column), and the
// message would then come back for ever. An id, topic or position that cannot be
// stored as it is is kept quoted and, past maxDeadIdent bytes, cut and hashed, so
// that two such ids never meet in the pending index (sqltext.Ident); the reason is
// cut to maxDeadReason bytes with refused bytes replaced (sqltext.Fit). A replay
// delivers the letter as stored: such an id comes back in its quoted form.
const (
	maxDeadIdent  = 1024
	maxDeadReason = 8 << 10
)

func (c *Consumer[Tx]) insertDeadLetter(ctx context.Context, q idemsql.Querier, it *item) error {
	headers, err := json.Marshal(it.d.Headers)
	if err != nil {
		return err
	}
	now := time.Now()
	first, attempts := now, max(it.d.Attempt, 1)
	if it.fail != nil {
		first, attempts = it.fail.first, max(attempts, it.fail.attempts)
	}
	payload := it.d.Payload
	if payload == nil {
		payload = []byte{}
	}
	_, err = q.Exec(ctx, c.sql.InsertDeadLetter,
		c.cfg.Consumer, sqltext.Ident(it.d.ID, maxDeadIdent), sqltext.Ident(it.d.Topic, maxDeadIdent),
		sqltext.Ident(it.d.Position, maxDeadIdent), string(headers), payload, it.kind,
		sqltext.Fit(it.err.Error(), maxDeadReason), attempts, first.UnixMilli(), now.UnixMilli())
	return err
}

// DeadLetters returns up to limit open dead letters of this consumer (neither
// replayed nor discarded), oldest first. DeadLetterAdmin.List filters and pages.
func (c *Consumer[Tx]) DeadLetters(ctx context.Context, limit int) ([]DeadLetter, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []DeadLetter
	err := c.db.InTx(ctx, func(tx Tx) (err error) {
		out, err = queryDeadLetters(ctx, c.db.Querier(tx), c.sql.OpenDeadLetters, c.cfg.Consumer, limit)
		return err
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: c.db.Dialect().String(), Op: "inbox.dead_letters", Err: err}
	}
	return out, nil
}

// deadLetterColumns names the columns of a read of dead letters (see
// idemsql.InboxSQL), for decode errors.
var deadLetterColumns = []string{"id", "consumer", "msg_id", "topic", "position", "headers", "payload", "kind",
	"reason", "attempts", "first_at", "dead_at", "replayed_at", "replay_requested_at", "replay_reason",
	"replay_attempts", "last_replay_error", "replay_note", "discarded_at", "discard_reason"}

// scanDeadLetter scans a row of a read of dead letters. What of the row cannot be
// decoded is the letter's DecodeError, not an error: one bad row must not hide
// the others from the operator.
func scanDeadLetter(r idemsql.Row) (DeadLetter, error) {
	var (
		dl                             DeadLetter
		headers                        string
		first, deadAt                  int64
		replayed, requested, discarded *int64
	)
	bad, err := rowscan.Scan(r, deadLetterColumns, &dl.ID, &dl.Consumer, &dl.Message.ID, &dl.Message.Topic, &dl.Position,
		&headers, &dl.Message.Payload, &dl.Kind, &dl.Reason, &dl.Attempts, &first, &deadAt, &replayed, &requested,
		&dl.ReplayReason, &dl.ReplayAttempts, &dl.LastReplayError, &dl.ReplayNote, &discarded, &dl.DiscardReason)
	if err != nil {
		return dl, err
	}
	dl.DecodeError = rowscan.Join(bad, rowscan.JSON("headers", headers, &dl.Message.Headers, "a JSON object of strings"))
	dl.FirstAt, dl.DeadAt = time.UnixMilli(first), time.UnixMilli(deadAt)
	switch {
	case discarded != nil: // a discard sets replayed_at too, which closes the letter
		dl.State, dl.DiscardedAt = StateDiscarded, time.UnixMilli(*discarded)
	case replayed != nil:
		dl.State, dl.ReplayedAt = StateReplayed, time.UnixMilli(*replayed)
	case requested != nil:
		dl.State, dl.ReplayRequestedAt = StateReplayRequested, time.UnixMilli(*requested)
	default:
		dl.State = StatePending
	}
	return dl, nil
}

// ErrNoDeadLetter is returned by Replay for an id that is not an open dead letter of
// this consumer, and by DeadLetterAdmin.Get and Discard for an unknown id. It
// matches idem.ErrNotFound.
var ErrNoDeadLetter error = &idem.NotFoundError{Msg: "inbox: no pending dead letter with this id for this consumer"}

// Replay applies dead letter id again, exactly once: in one transaction it claims the
// message's key, runs the handler and marks the dead letter replayed. It does not go
// back through the broker, whose dedup window could drop a republished id. applied is
// false when the key had been applied meanwhile (the dead letter is then marked
// replayed without running the handler). A handler error leaves the dead letter as it
// was and is returned.
//
// It is traced as an idem.inbox.replay span (see the package documentation), under
// which the handler runs.
func (c *Consumer[Tx]) Replay(ctx context.Context, id int64) (applied bool, err error) {
	ctx, span := c.startReplay(ctx, id, false)
	defer func() { endReplay(span, applied, err) }()
	return c.replay(ctx, span, id, false)
}

// replay is Replay, under span; requested limits it to a letter whose replay an
// operator requested (DeadLetterAdmin.RequestReplay), and not yet done.
func (c *Consumer[Tx]) replay(ctx context.Context, span trace.Span, id int64, requested bool) (applied bool, err error) {
	err = c.db.InTx(ctx, func(tx Tx) error {
		q := c.db.Querier(tx)
		query := c.sql.OpenDeadLetter
		if requested {
			query = c.sql.RequestedDeadLetter
		}
		dl, err := getDeadLetter(ctx, q, query, id, c.cfg.Consumer)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNoDeadLetter
		} else if err != nil {
			return err
		}
		if dl.DecodeError != "" {
			// Its message is not known whole: running the handler on part of it
			// could apply the wrong effect.
			return Permanent(fmt.Errorf("dead letter %d cannot be replayed: its row cannot be decoded (%s): correct the row, or discard the letter", id, dl.DecodeError))
		}
		c.traceLetter(span, dl)
		key, err := c.cfg.Key(dl.Message)
		if err != nil {
			return Permanent(fmt.Errorf("dead letter %d still has no usable key: %w", id, err))
		}
		k := idem.Key{Scope: c.cfg.Consumer, ID: key}
		otelx.SetKey(span, k)
		sum := sha256.Sum256(dl.Message.Payload)
		res, err := c.store.ClaimTx(ctx, tx, idem.Claim{Key: k, Fingerprint: sum[:16], Retention: c.cfg.keyRetention()})
		if err != nil {
			return err
		}
		otelx.SetOutcome(span, res.Outcome, res.Token)
		switch res.Outcome {
		case idem.Acquired:
			consumer := c.cfg.Consumer
			hctx := idem.WithKeyFunc(ctx, func() string { return idemkey.Derive(key, consumer) })
			if err := c.run(hctx, tx, dl.Message); err != nil {
				return err
			}
			if err := c.store.CompleteTx(ctx, tx, k, res.Token, nil); err != nil {
				return err
			}
			applied = true
		case idem.Mismatch:
			return Permanent(fmt.Errorf("dead letter %d: key %s was applied with a different payload", id, k))
		case idem.InProgress:
			return fmt.Errorf("dead letter %d: key %s is held by another worker; try again", id, k)
		}
		// Closed only if still open: an operator's discard, or another replay, that
		// committed meanwhile wins, and this transaction (the handler's writes with
		// it) rolls back.
		n, err := q.Exec(ctx, c.sql.CloseOpenDeadLetter, time.Now().UnixMilli(), id)
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNoDeadLetter
		}
		note := "already applied"
		if applied {
			note = "applied"
		}
		_, err = q.Exec(ctx, c.sql.NoteReplay, id, c.cfg.Consumer, note)
		return err
	})
	if err == nil {
		c.deadLettersChanged()
	}
	return applied, err
}
