package operator

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/migrate"
)

const dlqSynopsis = `List, show, replay or discard the inbox's dead letters: the messages a consumer
gave up on (a permanent error, too many attempts, no key, a reused key).

  idem dlq list    --db URL [--consumer C] [--kind K] [--reason TEXT] [--since T]
                            [--until T] [--after ID] [--limit N] [--all]
  idem dlq show    --db URL --id ID [--full]
  idem dlq replay  --db URL --id ID[,ID…] [--reason "…"]
  idem dlq discard --db URL --id ID --reason "…"

URL is the database of the consumers: postgres://user:pass@host:5432/db,
mysql://user:pass@host:3306/db or sqlite:PATH. list shows open letters (pending,
replay requested) unless --all; page with --after and the last id shown. T is
an RFC 3339 time or a duration before now (24h). Payloads are shown as a preview
(64 bytes: text if printable, else hex), as the admin API shows them; show
--full shows the whole payload, escaped.

replay does not run the handler here: it requests a replay, which the letter's
consumer (a running inbox.Consumer) performs at its next poll, exactly once;
'idem dlq show' then shows it replayed. replay exits 3 if an id is unknown and 4
if one was replayed or discarded already (the others are requested all the
same). discard closes a letter for good, without applying it, and keeps it with
its reason for audit.`

type dlqOptions struct {
	sqlFlags
	afterPage
	consumer, kind, reason, since, until string
	all, full                            bool
	ids                                  idList
}

// DLQ runs `idem dlq <action>`: the inbox's dead letters (list, show, replay, discard).
func (m *Cmd) DLQ(ctx context.Context, args []string) error {
	var o dlqOptions
	run := func(f func(context.Context, dlqOptions) error) func(context.Context) error {
		return func(ctx context.Context) error { return f(ctx, o) }
	}
	return m.runOps(ctx, opsCommand{name: "dlq", synopsis: dlqSynopsis, common: o.declare, actions: []opsAction{
		{"list", func(fs *flag.FlagSet) {
			fs.StringVar(&o.consumer, "consumer", "", "only this consumer's letters (inbox.Config.Consumer)")
			fs.StringVar(&o.kind, "kind", "", "only this kind: permanent, max_attempts, no_key, key_reused, or a refusal: stale_key, future_key, untimed_key, deadline, bad_deadline")
			fs.StringVar(&o.reason, "reason", "", "only letters whose reason contains this text (case-insensitive)")
			fs.StringVar(&o.since, "since", "", "only letters dead at or after this time (RFC 3339, or a duration before now: 24h)")
			fs.StringVar(&o.until, "until", "", "only letters dead before this time (RFC 3339, or a duration before now)")
			o.declarePage(fs, "letters", inbox.MaxListLimit)
			fs.BoolVar(&o.all, "all", false, "also replayed and discarded letters")
		}, run(m.dlqList)},
		{"show", func(fs *flag.FlagSet) {
			fs.Var(&o.ids, "id", "the dead letter's id")
			fs.BoolVar(&o.full, "full", false, "show the whole payload (escaped; base64 in --json), not a preview")
		}, run(m.dlqShow)},
		{"replay", func(fs *flag.FlagSet) {
			fs.Var(&o.ids, "id", "the dead letters to replay: repeat the flag or separate ids with commas")
			fs.StringVar(&o.reason, "reason", "", "why, recorded with the request")
		}, run(m.dlqReplay)},
		{"discard", func(fs *flag.FlagSet) {
			fs.Var(&o.ids, "id", "the dead letter to discard")
			fs.StringVar(&o.reason, "reason", "", "why it is dropped (required): kept with the letter for audit")
		}, run(m.dlqDiscard)},
	}}, args)
}

func (m *Cmd) openDeadLetters(ctx context.Context, cmd string, o dlqOptions) (*inbox.DeadLetterAdmin[*sql.Tx], func(), error) {
	db, closeDB, err := m.openOpsDB(ctx, cmd, o.db, migrate.Inbox)
	if err != nil {
		return nil, nil, err
	}
	return inbox.NewDeadLetterAdmin(db), closeDB, nil
}

func (m *Cmd) dlqList(ctx context.Context, o dlqOptions) error {
	const cmd = "dlq list"
	now := time.Now()
	f := inbox.DeadLetterFilter{Consumer: o.consumer, Kind: o.kind, ReasonContains: o.reason, AfterID: o.after,
		Limit: o.limit, IncludeDone: o.all}
	var err error
	if f.Since, err = parseTime("since", o.since, now); err != nil {
		return m.usagef(cmd, "%v", err)
	}
	if f.Until, err = parseTime("until", o.until, now); err != nil {
		return m.usagef(cmd, "%v", err)
	}
	if err := m.checkLimit(cmd, o.limit, inbox.MaxListLimit, "--after"); err != nil {
		return err
	}
	a, closeDB, err := m.openDeadLetters(ctx, cmd, o)
	if err != nil {
		return err
	}
	defer closeDB()
	dls, err := a.List(ctx, f)
	if err != nil {
		return badInput(err)
	}
	out := struct {
		DeadLetters []view.DeadLetterView `json:"dead_letters"`
		// NextAfter is the --after of the next page, 0 after the last.
		NextAfter int64 `json:"next_after"`
	}{DeadLetters: make([]view.DeadLetterView, 0, len(dls))}
	for _, dl := range dls {
		out.DeadLetters = append(out.DeadLetters, view.DeadLetterOf(dl).View(false))
	}
	if len(dls) == o.limit {
		out.NextAfter = dls[len(dls)-1].ID
	}
	if o.json {
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	var bad undecodable
	fmt.Fprintln(tw, "ID\tCONSUMER\tKIND\tSTATE\tATTEMPTS\tDEAD AT\tTOPIC\tMESSAGE ID\tREASON")
	for _, d := range out.DeadLetters {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", bad.mark(fmt.Sprint(d.ID), d.DecodeError), view.Cell(d.Consumer, 40),
			view.Cell(d.Kind, 20), view.Cell(d.State, 20), d.Attempts, view.When(d.DeadAt), view.Cell(d.Topic, 40), view.Cell(d.MessageID, 40), view.Cell(d.Reason, 60))
	}
	return m.endTable(tw, fmt.Sprintf("%d dead letters", len(out.DeadLetters)), moreAfter(out.NextAfter), bad.notes...)
}

func (m *Cmd) dlqShow(ctx context.Context, o dlqOptions) error {
	id, err := m.oneID("dlq show", o.ids)
	if err != nil {
		return err
	}
	a, closeDB, err := m.openDeadLetters(ctx, "dlq show", o)
	if err != nil {
		return err
	}
	defer closeDB()
	dl, err := a.Get(ctx, id)
	if errors.Is(err, inbox.ErrNoDeadLetter) {
		return notFoundf("no dead letter with id %d", id)
	} else if err != nil {
		return err
	}
	d := view.DeadLetterOf(dl).View(o.full)
	if o.json {
		return writeJSON(m.Stdout, d)
	}
	tw := newTable(m.Stdout)
	rows := [][2]string{
		{"id", fmt.Sprint(d.ID)}, {"consumer", view.Cell(d.Consumer, 0)}, {"state", view.Cell(d.State, 0)},
		{"kind", view.Cell(d.Kind, 0)}, {"reason", view.Cell(d.Reason, 0)}, {"attempts", fmt.Sprint(d.Attempts)},
		{"first failed", view.When(d.FirstAt)}, {"dead at", view.When(d.DeadAt)},
		{"message id", view.Cell(d.MessageID, 0)}, {"topic", view.Cell(d.Topic, 0)}, {"position", view.Cell(d.Position, 0)},
	}
	if d.DecodeError != "" {
		rows = append(rows, [2]string{"DECODE ERROR", view.Cell(d.DecodeError, 0) + " (it cannot be replayed: correct the row, or discard it)"})
	}
	for _, k := range slices.Sorted(maps.Keys(d.Headers)) {
		rows = append(rows, [2]string{"header " + view.Cell(k, 80), view.Cell(d.Headers[k], 200)})
	}
	rows = append(rows, [2]string{"payload", d.Payload.Text()})
	if !d.ReplayRequestedAt.IsZero() {
		rows = append(rows, [2]string{"replay requested", view.When(d.ReplayRequestedAt) + " " + view.Cell(d.ReplayReason, 0)},
			[2]string{"replay attempts", fmt.Sprint(d.ReplayAttempts)})
	}
	if d.LastReplayError != "" {
		rows = append(rows, [2]string{"last replay error", view.Cell(d.LastReplayError, 0)})
	}
	if !d.ReplayedAt.IsZero() && d.DiscardedAt.IsZero() {
		rows = append(rows, [2]string{"replayed", view.When(d.ReplayedAt) + " " + view.Cell(d.ReplayNote, 0)})
	}
	if !d.DiscardedAt.IsZero() {
		rows = append(rows, [2]string{"discarded", view.When(d.DiscardedAt) + " " + view.Cell(d.DiscardReason, 0)})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.full {
		fmt.Fprintf(m.Stdout, "full payload:\n%s\n", view.FullText(dl.Message.Payload))
	}
	return nil
}

func (m *Cmd) dlqReplay(ctx context.Context, o dlqOptions) error {
	const cmd = "dlq replay"
	if len(o.ids) == 0 {
		return m.usagef(cmd, "--id is required: name the dead letters to replay (--id 7 --id 9, or --id 7,9)")
	}
	if len(o.reason) > maxNote {
		return m.usagef(cmd, "--reason is %d bytes long: keep it to %d bytes", len(o.reason), maxNote)
	}
	a, closeDB, err := m.openDeadLetters(ctx, cmd, o)
	if err != nil {
		return err
	}
	defer closeDB()
	res, err := a.RequestReplay(ctx, o.ids, o.reason)
	if err != nil {
		return badInput(err)
	}
	type outcome struct {
		ID       int64  `json:"id"`
		Outcome  string `json:"outcome"` // requested, not_found or already_done
		Consumer string `json:"consumer,omitempty"`
	}
	out := struct {
		Replays []outcome `json:"replays"`
		Note    string    `json:"note"`
	}{Note: "a replay is requested here and performed by the letter's consumer (a running inbox.Consumer) at its next poll, exactly once: " +
		"'idem dlq show --id ID' shows when it is replayed"}
	var missing, done []string
	for _, r := range res {
		oc := outcome{ID: r.ID, Outcome: r.Outcome}
		switch r.Outcome {
		case inbox.ReplayRequested:
			if dl, err := a.Get(ctx, r.ID); err == nil {
				oc.Consumer = dl.Consumer
			}
		case inbox.ReplayNotFound:
			missing = append(missing, fmt.Sprint(r.ID))
		case inbox.ReplayAlreadyDone:
			done = append(done, fmt.Sprint(r.ID))
		}
		out.Replays = append(out.Replays, oc)
	}
	if o.json {
		if err := writeJSON(m.Stdout, out); err != nil {
			return err
		}
	} else {
		tw := newTable(m.Stdout)
		fmt.Fprintln(tw, "ID\tOUTCOME\tCONSUMER")
		for _, r := range out.Replays {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", r.ID, r.Outcome, view.Cell(r.Consumer, 60))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(m.Stdout, strings.Replace(out.Note, "a replay is requested", "replay requested", 1))
	}
	switch {
	case len(missing) > 0:
		return notFoundf("no dead letter with id %s", strings.Join(missing, ", "))
	case len(done) > 0:
		return conflictf("dead letter %s was replayed or discarded already", strings.Join(done, ", "))
	}
	return nil
}

func (m *Cmd) dlqDiscard(ctx context.Context, o dlqOptions) error {
	const cmd = "dlq discard"
	id, err := m.idAndReason(cmd, o.ids, o.reason)
	if err != nil {
		return err
	}
	a, closeDB, err := m.openDeadLetters(ctx, cmd, o)
	if err != nil {
		return err
	}
	defer closeDB()
	err = a.Discard(ctx, id, o.reason)
	switch {
	case errors.Is(err, inbox.ErrNoDeadLetter):
		return notFoundf("no dead letter with id %d: nothing discarded", id)
	case errors.Is(err, inbox.ErrDeadLetterClosed):
		return conflictf("dead letter %d was replayed or discarded already: nothing discarded", id)
	case err != nil:
		return badInput(err)
	}
	return m.printDiscarded(o.json, "dead letter", "replayed", id, o.reason)
}
