package operator

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/migrate"
	"github.com/idemhq/idem/outbox"
)

const outboxSynopsis = `Look at the transactional outbox and act on its parked messages (those the relay
gave up on after RelayConfig.MaxAttempts, and those relay --cdc could not publish).

  idem outbox status  --db URL                    backlog per topic and partition, relays
  idem outbox parked  --db URL [--after ID] [--limit N]
  idem outbox retry   --db URL --id ID            put a parked message back in line
  idem outbox discard --db URL --id ID --reason "…"   give up on it for good

URL is the service's database: postgres://user:pass@host:5432/db,
mysql://user:pass@host:3306/db or sqlite:PATH. status lists the relay instances;
one silent for 3 poll intervals (at least 30 s) is flagged stale: it died, hangs
or cannot reach the database, and is forgotten an hour later (a relay stopped
cleanly removes itself). retry resets the message's attempts: a running relay
publishes it at its next round (a message relay --cdc parked goes back in line as
a new row, with a new id, since that relay reads inserts only).
retry and discard exit 3 for an id that is not parked (unknown, published, or
discarded already).`

type outboxOptions struct {
	sqlFlags
	afterPage
	ids    idList
	reason string
}

// Outbox runs `idem outbox <action>`: backlog, parked messages and relays (status, parked, retry, discard).
func (m *Cmd) Outbox(ctx context.Context, args []string) error {
	var o outboxOptions
	run := func(f func(context.Context, outboxOptions) error) func(context.Context) error {
		return func(ctx context.Context) error { return f(ctx, o) }
	}
	id := func(fs *flag.FlagSet) { fs.Var(&o.ids, "id", "the parked message's id") }
	return m.runOps(ctx, opsCommand{name: "outbox", synopsis: outboxSynopsis, common: o.declare, actions: []opsAction{
		{"status", nil, run(m.outboxStatus)},
		{"parked", func(fs *flag.FlagSet) { o.declarePage(fs, "messages", outbox.MaxListLimit) }, run(m.outboxParked)},
		{"retry", id, run(m.outboxRetry)},
		{"discard", func(fs *flag.FlagSet) {
			id(fs)
			fs.StringVar(&o.reason, "reason", "", "why it is never published (required): kept for audit")
		}, run(m.outboxDiscard)},
	}}, args)
}

func (m *Cmd) openOutboxAdmin(ctx context.Context, cmd string, o outboxOptions) (*outbox.Admin[*sql.Tx], func(), error) {
	db, closeDB, err := m.openOpsDB(ctx, cmd, o.db, migrate.Outbox)
	if err != nil {
		return nil, nil, err
	}
	return outbox.NewAdmin(db), closeDB, nil
}

// PartitionJSON is one partition of `idem outbox status --json`.
type PartitionJSON struct {
	Topic         string  `json:"topic"`
	Partition     int     `json:"partition"`
	Unpublished   int64   `json:"unpublished"`
	OldestAgeSecs float64 `json:"oldest_age_seconds"`
	Parked        int64   `json:"parked"`
	Discarded     int64   `json:"discarded"`
}

// RelayJSON is one relay of `idem outbox status --json`.
type RelayJSON struct {
	Instance         string    `json:"instance"`
	Host             string    `json:"host"`
	PID              int64     `json:"pid"`
	StartedAt        time.Time `json:"started_at"`
	LastRoundAt      time.Time `json:"last_round_at"`
	PollIntervalSecs float64   `json:"poll_interval_seconds"`
	PublishedTotal   int64     `json:"published_total"`
	LastError        string    `json:"last_error"`
	Stale            bool      `json:"stale"`
}

func (m *Cmd) outboxStatus(ctx context.Context, o outboxOptions) error {
	a, closeDB, err := m.openOutboxAdmin(ctx, "outbox status", o)
	if err != nil {
		return err
	}
	defer closeDB()
	st, err := a.Status(ctx)
	if err != nil {
		return err
	}
	if o.json {
		out := struct {
			Partitions    []PartitionJSON `json:"partitions"`
			Unpublished   int64           `json:"unpublished"`
			Parked        int64           `json:"parked"`
			Discarded     int64           `json:"discarded"`
			OldestAgeSecs float64         `json:"oldest_age_seconds"`
			Relays        []RelayJSON     `json:"relays"`
		}{Partitions: []PartitionJSON{}, Unpublished: st.Unpublished, Parked: st.Parked, Discarded: st.Discarded,
			OldestAgeSecs: st.OldestAge.Seconds(), Relays: []RelayJSON{}}
		for _, p := range st.Partitions {
			out.Partitions = append(out.Partitions, PartitionJSON{p.Topic, p.Partition, p.Unpublished, p.OldestAge.Seconds(), p.Parked, p.Discarded})
		}
		for _, r := range st.Relays {
			out.Relays = append(out.Relays, RelayJSON{r.Instance, r.Host, r.PID, r.StartedAt, r.LastRoundAt,
				r.PollInterval.Seconds(), r.PublishedTotal, r.LastError, r.Stale})
		}
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tUNPUBLISHED\tOLDEST\tPARKED\tDISCARDED")
	for _, p := range st.Partitions {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\n", view.Cell(p.Topic, 60), p.Partition, p.Unpublished, age(p.OldestAge), p.Parked, p.Discarded)
	}
	fmt.Fprintf(tw, "total\t\t%d\t%s\t%d\t%d\n", st.Unpublished, age(st.OldestAge), st.Parked, st.Discarded)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout)
	if len(st.Relays) == 0 {
		fmt.Fprintln(m.Stdout, "no relay listed (none runs, none died within the hour): nothing publishes this outbox")
		return nil
	}
	tw = newTable(m.Stdout)
	fmt.Fprintln(tw, "RELAY\tHOST\tPID\tSTARTED\tLAST ROUND\tPOLL\tPUBLISHED\tSTATUS\tLAST ERROR")
	for _, r := range st.Relays {
		status := "ok"
		if r.Stale {
			status = "STALE"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", view.Cell(r.Instance, 60), view.Cell(r.Host, 40), r.PID, view.When(r.StartedAt),
			view.When(r.LastRoundAt), r.PollInterval, r.PublishedTotal, status, view.Cell(r.LastError, 80))
	}
	return tw.Flush()
}

func (m *Cmd) outboxParked(ctx context.Context, o outboxOptions) error {
	if err := m.checkLimit("outbox parked", o.limit, outbox.MaxListLimit, "--after"); err != nil {
		return err
	}
	a, closeDB, err := m.openOutboxAdmin(ctx, "outbox parked", o)
	if err != nil {
		return err
	}
	defer closeDB()
	ps, err := a.Parked(ctx, o.after, o.limit)
	if err != nil {
		return badInput(err)
	}
	out := struct {
		Parked    []view.ParkedView `json:"parked"`
		NextAfter int64             `json:"next_after"` // the --after of the next page, 0 after the last
	}{Parked: make([]view.ParkedView, 0, len(ps))}
	for _, p := range ps {
		out.Parked = append(out.Parked, view.ParkedOf(p).View(false))
	}
	if len(ps) == o.limit {
		out.NextAfter = ps[len(ps)-1].ID
	}
	if o.json {
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	var bad undecodable
	fmt.Fprintln(tw, "ID\tTOPIC\tMESSAGE ID\tATTEMPTS\tPARKED AT\tSTATE\tLAST ERROR\tPAYLOAD")
	for _, p := range out.Parked {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", bad.mark(fmt.Sprint(p.ID), p.DecodeError), view.Cell(p.Topic, 40),
			view.Cell(p.MessageID, 40), p.Attempts, view.When(p.ParkedAt), p.StateText(), view.Cell(p.LastError, 60), p.Payload.Text())
	}
	return m.endTable(tw, fmt.Sprintf("%d parked messages", len(out.Parked)), moreAfter(out.NextAfter), bad.notes...)
}

func (m *Cmd) outboxRetry(ctx context.Context, o outboxOptions) error {
	id, err := m.oneID("outbox retry", o.ids)
	if err != nil {
		return err
	}
	a, closeDB, err := m.openOutboxAdmin(ctx, "outbox retry", o)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := a.Retry(ctx, id); errors.Is(err, outbox.ErrNotParked) {
		return notFoundf("no parked message with id %d (unknown, published, or discarded): nothing retried", id)
	} else if err != nil {
		return err
	}
	if o.json {
		return writeJSON(m.Stdout, struct {
			Retried int64 `json:"retried"`
		}{id})
	}
	fmt.Fprintf(m.Stdout, "retried outbox message %d: its attempts are reset and a running relay publishes it at its next round\n", id)
	return nil
}

func (m *Cmd) outboxDiscard(ctx context.Context, o outboxOptions) error {
	const cmd = "outbox discard"
	id, err := m.idAndReason(cmd, o.ids, o.reason)
	if err != nil {
		return err
	}
	a, closeDB, err := m.openOutboxAdmin(ctx, cmd, o)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := a.Discard(ctx, id, o.reason); errors.Is(err, outbox.ErrNotParked) {
		return notFoundf("no parked message with id %d (unknown, published, or discarded already): nothing discarded", id)
	} else if err != nil {
		return badInput(err)
	}
	return m.printDiscarded(o.json, "outbox message", "published", id, o.reason)
}
