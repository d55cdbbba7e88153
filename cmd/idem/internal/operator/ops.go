package operator

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/redact"
	"github.com/idemhq/idem/migrate"
)

// The operator commands (keys, dlq, outbox, sagas) share this file: their action
// dispatch, their exit codes and their output (a table, or one JSON document with
// --json). What they show of a record and how stored bytes reach a terminal
// (previews, escaping, times) is the operator view, package admin/view, which the
// admin API and the console show too.

// Exit codes of the operator commands, besides 0 (ok), 1 (failure) and 2 (usage).
const (
	ExitNotFound = 3 // the key, dead letter, parked message or saga does not exist
	ExitConflict = 4 // its state does not allow the action
)

const opsExitCodes = `Exit codes: 0 ok, 1 failure (database unreachable…), 2 usage or bad input,
3 not found, 4 conflict (the state does not allow the action).`

// codeError is a failure with its own exit code: main prints it and exits with code.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func notFoundf(format string, args ...any) error {
	return &codeError{ExitNotFound, fmt.Errorf(format, args...)}
}

func conflictf(format string, args ...any) error {
	return &codeError{ExitConflict, fmt.Errorf(format, args...)}
}

// badInput maps a library's *idem.InputError to exit code 2; other errors pass.
func badInput(err error) error {
	var ie *idem.InputError
	if errors.As(err, &ie) {
		return &codeError{2, err}
	}
	return err
}

// ExitCode is the process's exit code for an error Run returned that main prints.
func ExitCode(err error) int {
	var ce *codeError
	if errors.As(err, &ce) {
		return ce.code
	}
	return 1
}

// opsCommand is one operator command: its actions, each with a flag set.
type opsCommand struct {
	name, synopsis string
	// common, if set, declares the flags every action takes (sqlFlags.declare).
	common  func(fs *flag.FlagSet)
	actions []opsAction
}

type opsAction struct {
	name string
	// flags, if set, declares the action's own flags on fs.
	flags func(fs *flag.FlagSet)
	// run runs the action once its flags are parsed.
	run func(ctx context.Context) error
}

// run parses `idem <name> <action> [flags]` and runs the action.
func (m *Cmd) runOps(ctx context.Context, c opsCommand, args []string) error {
	names := make([]string, len(c.actions))
	for i, a := range c.actions {
		names[i] = a.name
	}
	usage := func() {
		fmt.Fprintf(m.help(), "Usage: idem %s %s [flags]\n\n%s\n\n%s\n\nRun 'idem %s <action> --help' for an action's flags.\n",
			c.name, strings.Join(names, "|"), c.synopsis, opsExitCodes, c.name)
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			usage()
			return flag.ErrHelp
		}
		fmt.Fprintf(m.Stderr, "idem %s: name an action: %s\n\n", c.name, strings.Join(names, ", "))
		usage()
		return cli.ErrUsage
	}
	i := slices.IndexFunc(c.actions, func(a opsAction) bool { return a.name == args[0] })
	if i < 0 {
		fmt.Fprintf(m.Stderr, "idem %s: unknown action %q: use %s%s\n", c.name, args[0], strings.Join(names, ", "), cli.DidYouMean(args[0], names, ""))
		return cli.ErrUsage
	}
	name := c.name + " " + c.actions[i].name
	fs := m.newFlagSet(name, c.synopsis)
	fs.Usage = func() {
		fmt.Fprintf(m.help(), "Usage: idem %s [flags]\n\n%s\n\n%s\n\nFlags:\n", name, c.synopsis, opsExitCodes)
		m.printFlags(fs)
	}
	for _, declare := range []func(*flag.FlagSet){c.common, c.actions[i].flags} {
		if declare != nil {
			declare(fs)
		}
	}
	if err := cli.Parse(fs, args[1:]); err != nil {
		return err
	}
	return c.actions[i].run(ctx)
}

// usagef reports a bad command line on m.Stderr and returns cli.ErrUsage (exit 2).
func (m *Cmd) usagef(cmd, format string, args ...any) error {
	fmt.Fprintf(m.Stderr, "idem %s: %s\n", cmd, fmt.Sprintf(format, args...))
	return cli.ErrUsage
}

// writeJSON writes v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns the tabwriter of a human table; Flush writes it.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// endTable flushes a listing's table and prints the notes of its undecodable rows
// (undecodable.notes), its summary line, then, when another page follows, the flag
// that asks for it (more: "--cursor C", "--after N").
func (m *Cmd) endTable(tw *tabwriter.Writer, summary, more string, notes ...string) error {
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(m.Stdout, n)
	}
	fmt.Fprintln(m.Stdout, summary)
	if more != "" {
		fmt.Fprintln(m.Stdout, "more: "+more)
	}
	return nil
}

// undecodable marks the rows of a listing whose stored row could not be decoded
// (another service wrote it): the table shows them, marked, and the notes below it
// say why, so one bad row never hides the others.
type undecodable struct{ notes []string }

// mark returns the table's id cell of a row: id, then " !" when the row has a
// decode error, which a note then gives.
func (u *undecodable) mark(id, decodeErr string) string {
	if decodeErr == "" {
		return id
	}
	u.notes = append(u.notes, "! "+id+": its row cannot be decoded: "+view.Cell(decodeErr, 0))
	return id + " !"
}

// moreCursor is endTable's more for a page whose next cursor is next.
func moreCursor(next string) string {
	if next == "" {
		return ""
	}
	return "--cursor " + view.Cell(next, 0)
}

// moreAfter is endTable's more for a page continued after id (0: none).
func moreAfter(id int64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprint("--after ", id)
}

// age formats a duration for a table, to the second (to the millisecond below one).
func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// printDiscarded prints what a discard did to the item id (what: "dead letter"),
// which is then never done (never: "replayed").
func (m *Cmd) printDiscarded(asJSON bool, what, never string, id int64, reason string) error {
	if asJSON {
		return writeJSON(m.Stdout, struct {
			Discarded int64  `json:"discarded"`
			Reason    string `json:"reason"`
		}{id, reason})
	}
	_, err := fmt.Fprintf(m.Stdout, "discarded %s %d: it is never %s, and is kept for audit; reason: %s\n", what, id, never, view.Cell(reason, 0))
	return err
}

// maxNote bounds --reason and --note, as the packages do.
const maxNote = 1024

// checkNote checks a required --reason or --note.
func (m *Cmd) checkNote(cmd, flagName, text string) error {
	switch {
	case strings.TrimSpace(text) == "":
		return m.usagef(cmd, "--%s is required: say why, it is kept for audit", flagName)
	case len(text) > maxNote:
		return m.usagef(cmd, "--%s is %d bytes long: keep it to %d bytes (link to a ticket for more)", flagName, len(text), maxNote)
	}
	return nil
}

// parseTime reads --since and --until: an RFC 3339 time, or a duration before now
// (90m, 24h).
func parseTime(name, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--%s %q: use an RFC 3339 time (2026-01-02T15:04:05Z) or a duration before now (90m, 24h)", name, view.Cell(s, 64))
}

// idList is a repeatable --id flag of positive integers, comma-separated allowed.
type idList []int64

func (l *idList) String() string {
	s := make([]string, len(*l))
	for i, id := range *l {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}

func (l *idList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("%q is not an id: use the positive integer a list shows", view.Cell(part, 32))
		}
		if len(*l) >= 1000 {
			return errors.New("more than 1000 ids: act in batches")
		}
		*l = append(*l, id)
	}
	return nil
}

// oneID checks that ids holds exactly one id.
func (m *Cmd) oneID(cmd string, ids idList) (int64, error) {
	if len(ids) != 1 {
		return 0, m.usagef(cmd, "--id is required, once: name one id (a list shows them)")
	}
	return ids[0], nil
}

// afterPage is the --after and --limit of a listing paged by row id (dlq, outbox).
type afterPage struct {
	after int64
	limit int
}

func (p *afterPage) declarePage(fs *flag.FlagSet, what string, max int) {
	fs.Int64Var(&p.after, "after", 0, "only ids above this one: the last id of the previous page")
	fs.IntVar(&p.limit, "limit", 100, fmt.Sprintf("at most this many %s (1 to %d)", what, max))
}

// checkLimit checks a listing's --limit; next is the flag that asks for the next
// page.
func (m *Cmd) checkLimit(cmd string, limit, max int, next string) error {
	if limit < 1 || limit > max {
		return m.usagef(cmd, "--limit %d: use 1 to %d, and %s for the next page", limit, max, next)
	}
	return nil
}

// idAndReason checks the --id (once) and the required --reason of an action on
// one item.
func (m *Cmd) idAndReason(cmd string, ids idList, reason string) (int64, error) {
	id, err := m.oneID(cmd, ids)
	if err != nil {
		return 0, err
	}
	return id, m.checkNote(cmd, "reason", reason)
}

// sqlFlags are the --db and --json flags of dlq, outbox and sagas.
type sqlFlags struct {
	db   string
	json bool
}

func (f *sqlFlags) declare(fs *flag.FlagSet) {
	fs.StringVar(&f.db, "db", "", "the database: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or sqlite:PATH")
	fs.BoolVar(&f.json, "json", false, "print one JSON document instead of a table")
}

// openOpsDB opens --db for an operator command, and checks that the schema of sets
// is there (`idem migrate up` applies it). Unlike migrate's, a SQLite file must
// exist: an operator who mistyped its path gets an error, not a new empty file.
func (m *Cmd) openOpsDB(ctx context.Context, cmd, raw string, sets ...migrate.Set) (idemsql.TxDB[*sql.Tx], func(), error) {
	if raw == "" {
		return idemsql.TxDB[*sql.Tx]{}, nil, m.usagef(cmd, "--db is required: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or sqlite:PATH")
	}
	if path, ok := strings.CutPrefix(raw, "sqlite:"); ok && path != "" {
		if _, err := os.Stat(path); err != nil {
			return idemsql.TxDB[*sql.Tx]{}, nil, fmt.Errorf("--db %s: %s: name the file your service uses", redact.URL(raw), cli.FileProblem(err))
		}
	}
	db, closeDB, err := open.SQLDB(ctx, raw)
	if err != nil {
		return db, nil, err
	}
	if err := migrate.Require(ctx, db, sets...); err != nil {
		closeDB()
		return db, nil, fmt.Errorf("--db %s: %w", redact.URL(raw), err)
	}
	return db, closeDB, nil
}
