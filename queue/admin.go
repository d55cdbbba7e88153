package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// The operator's reads of a queue: its state per topic, and its messages,
// unfinished and finished, a page at a time. They need the database alone: a
// tool in another process (the admin API, `idem queue`) opens the queue with
// Config{SkipMigrate: true} and reads. Cancel acts.

// Bounds on the listings.
const (
	// DefaultListLimit is the page size of Unfinished and Finished for a limit
	// of 0.
	DefaultListLimit = 100
	// MaxListLimit bounds their limit.
	MaxListLimit = 1000
	// maxTopicFilter bounds a listing's topic, as an operator types it.
	maxTopicFilter = 1024
)

// TopicStatus is one topic's unfinished messages at a glance.
type TopicStatus struct {
	Topic string
	// Ready are due and waiting for a consumer (an expired lease's message
	// included: it is claimable again). A message behind an earlier one of its
	// ordering key counts as ready though it waits for that one.
	Ready int64
	// Running are leased to a consumer, within the lease.
	Running int64
	// Retrying are backing off after a failed attempt (a Nak's delay).
	Retrying int64
	// Scheduled are waiting for their run-at time (Job.RunAt), never attempted.
	Scheduled int64
	// OldestReadyAge is how long ago the oldest ready message was enqueued; 0
	// when none is ready. Growing, it says no consumer takes the topic's
	// messages.
	OldestReadyAge time.Duration
}

// Info is one message of the queue as the operator sees it (its payload and
// headers are not read).
type Info struct {
	// ID is the row's id: the order of the queue, and a listing's cursor.
	ID int64
	// MessageID is the message's ID (idem.Message.ID), which Cancel takes.
	MessageID   string
	Topic       string
	OrderingKey string
	// Attempts counts the claims of the message (the current lease's fencing
	// token while it runs).
	Attempts  int
	CreatedAt time.Time
	// AvailableAt is when it is due: its run-at, the end of its lease while
	// it runs, or the end of its backoff after a failure.
	AvailableAt time.Time
	// LeasedBy names the Source that holds it (SourceConfig.Worker); "" when
	// none does.
	LeasedBy string
	// LastError is why its last attempt failed, or why it was cancelled or
	// could not be delivered.
	LastError string
	// FinishedAt is when it finished; zero while unfinished.
	FinishedAt time.Time
	// Outcome is how it finished: applied, duplicate, dead, cancelled, acked
	// (the idemsql.Queue* outcomes); "" while unfinished.
	Outcome string
}

// State is where an unfinished message stands at now: ready, running,
// retrying or scheduled (the TopicStatus counts); a finished one's is its
// Outcome.
func (i Info) State(now time.Time) string {
	switch {
	case !i.FinishedAt.IsZero():
		return i.Outcome
	case !i.AvailableAt.After(now):
		return "ready"
	case i.LeasedBy != "":
		return "running"
	case i.Attempts > 0:
		return "retrying"
	}
	return "scheduled"
}

// Status returns the unfinished messages per topic with any, by topic. It
// reads every unfinished row: with a large backlog it takes a while (see
// Config.GaugeInterval).
func (q *Queue[Tx]) Status(ctx context.Context) ([]TopicStatus, error) {
	now := q.cfg.Now()
	var out []TopicStatus
	err := q.db.Auto(ctx, func(qr idemsql.Querier) (err error) {
		out, err = idemsql.Collect(ctx, qr, q.stmts.Status, []any{now.UnixMilli()}, func(rs idemsql.Rows) (t TopicStatus, err error) {
			var oldest *int64
			err = rs.Scan(&t.Topic, &t.Ready, &t.Running, &t.Retrying, &t.Scheduled, &oldest)
			if oldest != nil {
				t.OldestReadyAge = max(now.Sub(time.UnixMilli(*oldest)), 0)
			}
			return t, err
		})
		return err
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: q.db.Dialect().String(), Op: "queue.status", Err: err}
	}
	return out, nil
}

// Unfinished returns up to limit (0: DefaultListLimit; at most MaxListLimit)
// unfinished messages of topic ("" for every topic) with ids above after, in
// id order: pass the last one's ID as after for the next page.
func (q *Queue[Tx]) Unfinished(ctx context.Context, topic string, after int64, limit int) ([]Info, error) {
	return q.list(ctx, "queue.unfinished", q.stmts.ListUnfinished, topic, after, limit)
}

// Finished returns up to limit (0: DefaultListLimit; at most MaxListLimit)
// finished messages of topic ("" for every topic) with ids below before (0:
// from the newest), newest first: pass the last one's ID as before for the
// next page. Finished messages stay for Config.Retention.
func (q *Queue[Tx]) Finished(ctx context.Context, topic string, before int64, limit int) ([]Info, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	return q.list(ctx, "queue.finished", q.stmts.ListFinished, topic, before, limit)
}

func (q *Queue[Tx]) list(ctx context.Context, op, query, topic string, from int64, limit int) ([]Info, error) {
	switch {
	case limit < 0 || limit > MaxListLimit:
		return nil, &idem.InputError{Field: "limit", Reason: fmt.Sprintf("must be 0 to %d (got %d)", MaxListLimit, limit),
			Fix: "page with the last id instead of asking for more at once"}
	case limit == 0:
		limit = DefaultListLimit
	case len(topic) > maxTopicFilter:
		return nil, &idem.InputError{Field: "topic", Reason: fmt.Sprintf("is longer than %d bytes", maxTopicFilter),
			Fix: "name a topic the producers enqueue to, or none for every topic"}
	}
	var out []Info
	err := q.db.Auto(ctx, func(qr idemsql.Querier) (err error) {
		out, err = idemsql.Collect(ctx, qr, query, []any{topic, from, limit}, scanInfo)
		return err
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: q.db.Dialect().String(), Op: op, Err: err}
	}
	return out, nil
}

// scanInfo reads a listing's row (idemsql.QueueSQL's listing columns).
func scanInfo(rs idemsql.Rows) (i Info, err error) {
	var created, available int64
	var finished *int64
	if err := rs.Scan(&i.ID, &i.MessageID, &i.Topic, &i.OrderingKey, &i.Attempts, &created, &available,
		&i.LeasedBy, &i.LastError, &finished, &i.Outcome); err != nil {
		return i, err
	}
	i.CreatedAt, i.AvailableAt = time.UnixMilli(created), time.UnixMilli(available)
	if finished != nil {
		i.FinishedAt = time.UnixMilli(*finished)
	}
	return i, nil
}
