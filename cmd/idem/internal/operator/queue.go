package operator

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/migrate"
	"github.com/idemhq/idem/queue"
)

const queueSynopsis = `Look at the database as the queue (package queue) and cancel its messages.

  idem queue status --db URL [--topic T]          unfinished messages per topic and state
  idem queue list   --db URL [--topic T] [--state unfinished|finished] [--after ID] [--limit N]
  idem queue cancel --db URL --topic T --id MSG-ID --reason "…"

URL is the service's database: postgres://user:pass@host:5432/db,
mysql://user:pass@host:3306/db or sqlite:PATH. status counts, per topic, the
messages ready (due, waiting for a consumer), running (leased), retrying
(backing off after a failure) and scheduled (waiting for their run-at), and the
age of the oldest ready one: growing, no consumer takes the topic. list shows
the unfinished messages oldest first, or the finished ones (applied, duplicate,
dead, cancelled, acked; kept for the queue's retention) newest first; --after
takes the last id of the previous page. cancel finishes an unfinished message
as cancelled: it will not run, and a consumer running it cannot commit its
effect. It exits 3 when the topic and id name no unfinished message.`

type queueOptions struct {
	sqlFlags
	topic, state, id, reason string
	after                    int64
	limit                    int
}

// Queue runs `idem queue <action>`: the database as the queue (status, list, cancel).
func (m *Cmd) Queue(ctx context.Context, args []string) error {
	var o queueOptions
	run := func(f func(context.Context, queueOptions) error) func(context.Context) error {
		return func(ctx context.Context) error { return f(ctx, o) }
	}
	topic := func(fs *flag.FlagSet, doc string) { fs.StringVar(&o.topic, "topic", "", doc) }
	return m.runOps(ctx, opsCommand{name: "queue", synopsis: queueSynopsis, common: o.declare, actions: []opsAction{
		{"status", func(fs *flag.FlagSet) { topic(fs, "only this topic (default: every topic with unfinished messages)") }, run(m.queueStatus)},
		{"list", func(fs *flag.FlagSet) {
			topic(fs, "only this topic's messages (default: every topic)")
			fs.StringVar(&o.state, "state", "unfinished", "unfinished (oldest first) or finished (newest first)")
			fs.Int64Var(&o.after, "after", 0, "continue after this id: the last id of the previous page")
			fs.IntVar(&o.limit, "limit", queue.DefaultListLimit, fmt.Sprintf("at most this many messages (1 to %d)", queue.MaxListLimit))
		}, run(m.queueList)},
		{"cancel", func(fs *flag.FlagSet) {
			topic(fs, "the message's topic (required)")
			fs.StringVar(&o.id, "id", "", "the message's id, as list shows it under MESSAGE ID (required)")
			fs.StringVar(&o.reason, "reason", "", "why it must not run (required): kept with the message")
		}, run(m.queueCancel)},
	}}, args)
}

func (m *Cmd) openQueue(ctx context.Context, cmd string, o queueOptions) (*queue.Queue[*sql.Tx], func(), error) {
	db, closeDB, err := m.openOpsDB(ctx, cmd, o.db, migrate.Queue)
	if err != nil {
		return nil, nil, err
	}
	q, err := queue.New(ctx, db, queue.Config{SkipMigrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		closeDB()
		return nil, nil, err
	}
	return q, closeDB, nil
}

func (m *Cmd) queueStatus(ctx context.Context, o queueOptions) error {
	q, closeDB, err := m.openQueue(ctx, "queue status", o)
	if err != nil {
		return err
	}
	defer closeDB()
	st, err := q.Status(ctx)
	if err != nil {
		return err
	}
	out := struct {
		Topics []view.QueueTopic `json:"topics"`
	}{Topics: []view.QueueTopic{}}
	var total view.QueueTopic
	var oldest time.Duration
	for _, t := range st {
		if o.topic != "" && t.Topic != o.topic {
			continue
		}
		out.Topics = append(out.Topics, view.QueueTopicOf(t))
		total.Ready, total.Running, total.Retrying, total.Scheduled = total.Ready+t.Ready, total.Running+t.Running,
			total.Retrying+t.Retrying, total.Scheduled+t.Scheduled
		oldest = max(oldest, t.OldestReadyAge)
	}
	if o.json {
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	fmt.Fprintln(tw, "TOPIC\tREADY\tRUNNING\tRETRYING\tSCHEDULED\tOLDEST READY")
	for _, t := range out.Topics {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", view.Cell(t.Topic, 60), t.Ready, t.Running, t.Retrying, t.Scheduled,
			age(time.Duration(t.OldestReadyAgeSeconds*float64(time.Second))))
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%s\n", total.Ready, total.Running, total.Retrying, total.Scheduled, age(oldest))
	return tw.Flush()
}

func (m *Cmd) queueList(ctx context.Context, o queueOptions) error {
	const cmd = "queue list"
	if err := m.checkLimit(cmd, o.limit, queue.MaxListLimit, "--after"); err != nil {
		return err
	}
	if o.state != "unfinished" && o.state != "finished" {
		return m.usagef(cmd, "--state %q: use unfinished or finished", view.Cell(o.state, 32))
	}
	if o.after < 0 {
		return m.usagef(cmd, "--after %d: use the last id of the previous page, or 0 for the first", o.after)
	}
	q, closeDB, err := m.openQueue(ctx, cmd, o)
	if err != nil {
		return err
	}
	defer closeDB()
	list := q.Unfinished
	if o.state == "finished" {
		list = q.Finished
	}
	rows, err := list(ctx, o.topic, o.after, o.limit)
	if err != nil {
		return badInput(err)
	}
	now := time.Now()
	out := struct {
		Messages  []view.QueueMessage `json:"messages"`
		NextAfter int64               `json:"next_after"` // the --after of the next page, 0 after the last
	}{Messages: make([]view.QueueMessage, 0, len(rows))}
	for _, r := range rows {
		out.Messages = append(out.Messages, view.QueueMessageOf(r, now))
	}
	if len(rows) == o.limit {
		out.NextAfter = rows[len(rows)-1].ID
	}
	if o.json {
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	fmt.Fprintln(tw, "ID\tTOPIC\tMESSAGE ID\tKEY\tSTATE\tATTEMPTS\tCREATED\tAVAILABLE\tLEASED BY\tLAST ERROR")
	for _, r := range out.Messages {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, view.Cell(r.Topic, 40), view.Cell(r.MessageID, 40),
			view.Cell(r.OrderingKey, 30), r.State, r.Attempts, view.When(r.CreatedAt), view.When(r.AvailableAt),
			view.Cell(r.LeasedBy, 40), view.Cell(r.LastError, 60))
	}
	return m.endTable(tw, fmt.Sprintf("%d %s messages", len(out.Messages), o.state), moreAfter(out.NextAfter))
}

func (m *Cmd) queueCancel(ctx context.Context, o queueOptions) error {
	const cmd = "queue cancel"
	switch {
	case o.topic == "":
		return m.usagef(cmd, "--topic is required: the message's topic, as list shows it")
	case o.id == "":
		return m.usagef(cmd, "--id is required: the message's id, as list shows it under MESSAGE ID")
	}
	if err := m.checkNote(cmd, "reason", o.reason); err != nil {
		return err
	}
	q, closeDB, err := m.openQueue(ctx, cmd, o)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := q.Cancel(ctx, o.topic, o.id, o.reason); errors.Is(err, queue.ErrNotUnfinished) {
		return notFoundf("no unfinished message of topic %s with id %s (never enqueued, finished already, or swept): nothing cancelled",
			view.Cell(o.topic, 0), view.Cell(o.id, 0))
	} else if err != nil {
		return badInput(err)
	}
	if o.json {
		return writeJSON(m.Stdout, struct {
			Topic     string `json:"topic"`
			Cancelled string `json:"cancelled"`
			Reason    string `json:"reason"`
		}{o.topic, o.id, o.reason})
	}
	_, err = fmt.Fprintf(m.Stdout, "cancelled queue message %s of topic %s: it will not run, and a consumer running it cannot commit its effect; reason: %s\n",
		view.Cell(o.id, 0), view.Cell(o.topic, 0), view.Cell(o.reason, 0))
	return err
}
