package operator

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/migrate"
)

const sagasSynopsis = `List and inspect sagas; retry a failed or stuck step, or resolve one by hand.

  idem sagas list    --db URL [--state S] [--cursor C] [--limit N]
  idem sagas show    --db URL --id ID [--full]
  idem sagas retry   --db URL --id ID --reason "…"
  idem sagas resolve --db URL --id ID --note "…"
  idem sagas purge   --db URL --older-than D [--effects]

URL is the orchestrators' database: postgres://user:pass@host:5432/db,
mysql://user:pass@host:3306/db or sqlite:PATH. S is running, compensating,
completed, compensated, failed or resolved; or parked, for the running and
compensating sagas the orchestrators set aside because they cannot run them
(their row cannot be decoded, or names a step their definition lacks): the
reason says why. Correct such a saga's row, then retry it: it goes on from its
step; or resolve it.

retry makes the running orchestrators run the saga's current step again, now: a
failed saga (a compensation failed permanently) goes back to compensating and
its compensation is called again with the same idempotency key, so fix the
cause first. resolve marks a running, compensating or failed saga resolved by
hand: no orchestrator advances it again. Both fence out an orchestrator that is
advancing the saga, and exit 4 for a saga that has ended (completed,
compensated, resolved). The saga's data and step results are shown as previews
(64 bytes: text if printable, else hex) unless show --full.

purge deletes the finished sagas (completed, compensated, resolved) last changed
longer than D ago (at least 1h), each with its step effects and resolution note;
never a running, compensating or failed one. With --effects it also deletes the
complete effects as old, except those of sagas not finished. Run the library's
saga.Sweeper and effect.Sweeper to do this continuously.`

type sagasOptions struct {
	sqlFlags
	state, cursor, id, text string
	limit                   int
	full, effects           bool
	olderThan               time.Duration
}

// Sagas runs `idem sagas <action>`: list, show, retry, resolve or purge sagas.
func (m *Cmd) Sagas(ctx context.Context, args []string) error {
	var o sagasOptions
	id := func(fs *flag.FlagSet) { fs.StringVar(&o.id, "id", "", "the saga's id") }
	return m.runOps(ctx, opsCommand{name: "sagas", synopsis: sagasSynopsis, common: o.declare, actions: []opsAction{
		{"list", func(fs *flag.FlagSet) {
			fs.StringVar(&o.state, "state", "", "only sagas in this state (running, compensating, completed, compensated, failed, resolved), or parked")
			fs.StringVar(&o.cursor, "cursor", "", "the page after this cursor (the last page printed it)")
			fs.IntVar(&o.limit, "limit", 100, fmt.Sprintf("at most this many sagas (1 to %d)", idem.MaxListLimit))
		}, func(ctx context.Context) error { return m.sagasList(ctx, o) }},
		{"show", func(fs *flag.FlagSet) {
			id(fs)
			fs.BoolVar(&o.full, "full", false, "show the whole data and results (base64 in --json), not previews")
		}, func(ctx context.Context) error { return m.sagasShow(ctx, o) }},
		{"retry", func(fs *flag.FlagSet) {
			id(fs)
			fs.StringVar(&o.text, "reason", "", "why (required): appended to the saga's reason")
		}, func(ctx context.Context) error { return m.sagasChange(ctx, o, "retry", "reason") }},
		{"resolve", func(fs *flag.FlagSet) {
			id(fs)
			fs.StringVar(&o.text, "note", "", "what was done by hand (required): recorded with the resolution")
		}, func(ctx context.Context) error { return m.sagasChange(ctx, o, "resolve", "note") }},
		m.sagasPurgeAction(&o),
	}}, args)
}

func (m *Cmd) openSagaAdmin(ctx context.Context, cmd string, o sagasOptions) (*saga.Admin[*sql.Tx], func(), error) {
	db, closeDB, err := m.openOpsDB(ctx, cmd, o.db, migrate.Saga, migrate.Effect)
	if err != nil {
		return nil, nil, err
	}
	a, err := saga.NewAdmin(ctx, db)
	if err != nil {
		closeDB()
		return nil, nil, err
	}
	return a, closeDB, nil
}

func (m *Cmd) sagasList(ctx context.Context, o sagasOptions) error {
	if err := m.checkLimit("sagas list", o.limit, idem.MaxListLimit, "--cursor"); err != nil {
		return err
	}
	a, closeDB, err := m.openSagaAdmin(ctx, "sagas list", o)
	if err != nil {
		return err
	}
	defer closeDB()
	page, err := a.List(ctx, o.state, o.cursor, o.limit)
	if err != nil {
		return badInput(err)
	}
	out := struct {
		Sagas []view.Saga `json:"sagas"`
		Next  string      `json:"next"`
	}{make([]view.Saga, 0, len(page.Sagas)), page.Next}
	for _, in := range page.Sagas {
		out.Sagas = append(out.Sagas, view.SagaOf(in))
	}
	if o.json {
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	var bad undecodable
	fmt.Fprintln(tw, "ID\tSAGA\tSTATE\tSTEP\tATTEMPTS\tUPDATED\tREASON")
	for _, s := range out.Sagas {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", bad.mark(view.Cell(s.ID, 60), s.DecodeError), view.Cell(s.Name, 40), s.StateText(),
			s.Step, s.Attempts, view.When(s.UpdatedAt), view.Cell(s.Reason, 60))
	}
	return m.endTable(tw, fmt.Sprintf("%d sagas", len(out.Sagas)), moreCursor(page.Next), bad.notes...)
}

func (m *Cmd) sagasShow(ctx context.Context, o sagasOptions) error {
	if o.id == "" {
		return m.usagef("sagas show", "--id is required: name the saga (sagas list shows them)")
	}
	a, closeDB, err := m.openSagaAdmin(ctx, "sagas show", o)
	if err != nil {
		return err
	}
	defer closeDB()
	d, err := a.Get(ctx, o.id)
	if errors.Is(err, saga.ErrNotFound) {
		return notFoundf("no saga with id %q", view.Cell(o.id, 0))
	} else if err != nil {
		return badInput(err)
	}
	out := struct {
		view.Saga
		Data       view.Preview            `json:"data"`
		Results    map[string]view.Preview `json:"results"`
		NextAt     time.Time               `json:"next_at,omitzero"`
		LeaseUntil time.Time               `json:"lease_until,omitzero"`
		Effects    []view.EffectView       `json:"effects"`
		Resolution *saga.Resolution        `json:"resolution,omitempty"`
	}{Saga: view.SagaOf(d.Instance), Data: view.NewPreview(d.Data, o.full), Results: map[string]view.Preview{},
		Effects: []view.EffectView{}, Resolution: d.Resolution}
	if d.NextAt.UnixNano() > 0 {
		out.NextAt = d.NextAt
	}
	if d.LeaseUntil.After(time.Now()) {
		out.LeaseUntil = d.LeaseUntil
	}
	for step, r := range d.Results {
		out.Results[step] = view.NewPreview(r, o.full)
	}
	for _, e := range d.Effects {
		out.Effects = append(out.Effects, view.EffectViewOf(e, o.full))
	}
	if o.json {
		return writeJSON(m.Stdout, out)
	}
	tw := newTable(m.Stdout)
	rows := [][2]string{{"id", view.Cell(d.ID, 0)}, {"saga", view.Cell(d.Saga, 0)}, {"state", out.StateText()}, {"step", fmt.Sprint(d.Step)},
		{"attempts", fmt.Sprint(d.Attempts)}, {"reason", view.Cell(d.Reason, 0)}, {"created", view.When(d.Created)},
		{"updated", view.When(d.Updated)}, {"next run", view.When(out.NextAt)}, {"leased until", view.When(out.LeaseUntil)},
		{"data", out.Data.Text()}}
	if d.DecodeError != "" {
		rows = append(rows, [2]string{"DECODE ERROR", view.Cell(d.DecodeError, 0) + " (no orchestrator runs it: correct the row, or resolve it)"})
	}
	if d.Parked {
		rows = append(rows, [2]string{"PARKED", "no orchestrator runs it until its row is corrected and it is retried, or it is resolved: the reason says why"})
	}
	for _, step := range slices.Sorted(maps.Keys(out.Results)) {
		rows = append(rows, [2]string{"result " + view.Cell(step, 60), out.Results[step].Text()})
	}
	if r := d.Resolution; r != nil {
		rows = append(rows, [2]string{"resolved", fmt.Sprintf("%s (was %s): %s", view.When(r.At), view.Cell(r.PreviousState, 0), view.Cell(r.Note, 0))})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout)
	tw = newTable(m.Stdout)
	var bad undecodable
	fmt.Fprintln(tw, "STEP\tSTATE\tATTEMPTS\tUPDATED\tREASON")
	for _, e := range out.Effects {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", bad.mark(view.Cell(e.Step, 60), e.DecodeError), view.Cell(e.State, 20), e.Attempts, view.When(e.UpdatedAt), view.Cell(e.Error, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range bad.notes {
		fmt.Fprintln(m.Stdout, n)
	}
	if o.full {
		fmt.Fprintf(m.Stdout, "full data:\n%s\n", view.FullText(d.Data))
		for _, step := range slices.Sorted(maps.Keys(d.Results)) {
			fmt.Fprintf(m.Stdout, "full result of %s:\n%s\n", view.Cell(step, 60), view.FullText(d.Results[step]))
		}
	}
	return nil
}

// sagasChange is retry (flagName reason) and resolve (note).
func (m *Cmd) sagasChange(ctx context.Context, o sagasOptions, op, flagName string) error {
	cmd := "sagas " + op
	if o.id == "" {
		return m.usagef(cmd, "--id is required: name the saga (sagas list shows them)")
	}
	if err := m.checkNote(cmd, flagName, o.text); err != nil {
		return err
	}
	a, closeDB, err := m.openSagaAdmin(ctx, cmd, o)
	if err != nil {
		return err
	}
	defer closeDB()
	before, err := a.Get(ctx, o.id)
	if errors.Is(err, saga.ErrNotFound) {
		return notFoundf("no saga with id %q: nothing done", view.Cell(o.id, 0))
	} else if err != nil {
		return badInput(err)
	}
	if op == "retry" {
		err = a.RetryStep(ctx, o.id, o.text)
	} else {
		err = a.Resolve(ctx, o.id, o.text)
	}
	var se *saga.StateError
	switch {
	case errors.Is(err, saga.ErrNotFound):
		return notFoundf("no saga with id %q: nothing done", view.Cell(o.id, 0))
	case errors.As(err, &se):
		return &codeError{ExitConflict, fmt.Errorf("%w; nothing done", se)}
	case err != nil:
		return badInput(err)
	}
	after, err := a.Get(ctx, o.id)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(m.Stdout, struct {
			ID       string `json:"id"`
			Action   string `json:"action"`
			Previous string `json:"previous_state"`
			State    string `json:"state"`
			Text     string `json:"text"` // the reason or note
		}{o.id, op, before.State, after.State, o.text})
	}
	what := "retried: the running orchestrators run its current step again at their next poll"
	if op == "resolve" {
		what = "resolved by hand: no orchestrator advances it again"
	}
	fmt.Fprintf(m.Stdout, "saga %s (%s) %s; it was %s, it is %s; %s: %s\n", view.Cell(o.id, 0), view.Cell(before.Saga, 0), what,
		view.Cell(before.State, 0), view.Cell(after.State, 0), flagName, view.Cell(o.text, 0))
	return nil
}
