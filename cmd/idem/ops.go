package main

import (
	"context"
	"database/sql"
	"encoding/hex"
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
	"unicode"
	"unicode/utf8"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// The operator commands (keys, dlq, outbox, sagas) share this file: their action
// dispatch, their exit codes, their output (a table, or one JSON document with
// --json) and the escaping of stored bytes before they reach a terminal.

// Exit codes of the operator commands, besides 0 (ok), 1 (failure) and 2 (usage).
const (
	exitNotFound = 3 // the key, dead letter, parked message or saga does not exist
	exitConflict = 4 // its state does not allow the action
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
	return &codeError{exitNotFound, fmt.Errorf(format, args...)}
}

func conflictf(format string, args ...any) error {
	return &codeError{exitConflict, fmt.Errorf(format, args...)}
}

// badInput maps a library's *idem.InputError to exit code 2; other errors pass.
func badInput(err error) error {
	var ie *idem.InputError
	if errors.As(err, &ie) {
		return &codeError{2, err}
	}
	return err
}

// exitCode is the process's exit code for an error Run returned that main prints.
func exitCode(err error) int {
	var ce *codeError
	if errors.As(err, &ce) {
		return ce.code
	}
	return 1
}

// opsCommand is one operator command: its actions, each with a flag set.
type opsCommand struct {
	name, synopsis string
	actions        []opsAction
}

type opsAction struct {
	name string
	// flags declares the action's flags on fs and returns what runs it.
	flags func(fs *flag.FlagSet) func(ctx context.Context) error
}

// run parses `idem <name> <action> [flags]` and runs the action.
func (m *Main) runOps(ctx context.Context, c opsCommand, args []string) error {
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
		return errUsage
	}
	i := slices.IndexFunc(c.actions, func(a opsAction) bool { return a.name == args[0] })
	if i < 0 {
		fmt.Fprintf(m.Stderr, "idem %s: unknown action %q: use %s%s\n", c.name, args[0], strings.Join(names, ", "), didYouMean(args[0], names, ""))
		return errUsage
	}
	name := c.name + " " + c.actions[i].name
	fs := m.newFlagSet(name, c.synopsis)
	fs.Usage = func() {
		fmt.Fprintf(m.help(), "Usage: idem %s [flags]\n\n%s\n\n%s\n\nFlags:\n", name, c.synopsis, opsExitCodes)
		m.printFlags(fs)
	}
	do := c.actions[i].flags(fs)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	return do(ctx)
}

// usagef reports a bad command line on m.Stderr and returns errUsage (exit 2).
func (m *Main) usagef(cmd, format string, args ...any) error {
	fmt.Fprintf(m.Stderr, "idem %s: %s\n", cmd, fmt.Sprintf(format, args...))
	return errUsage
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
func (m *Main) endTable(tw *tabwriter.Writer, summary, more string, notes ...string) error {
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
	u.notes = append(u.notes, "! "+id+": its row cannot be decoded: "+cell(decodeErr, 0))
	return id + " !"
}

// moreCursor is endTable's more for a page whose next cursor is next.
func moreCursor(next string) string {
	if next == "" {
		return ""
	}
	return "--cursor " + cell(next, 0)
}

// moreAfter is endTable's more for a page continued after id (0: none).
func moreAfter(id int64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprint("--after ", id)
}

// cell makes text from the database safe for a table cell: control characters
// (tabs and newlines too, which would break the columns, and escape sequences,
// which a terminal would obey) escaped as \x.., invalid UTF-8 escaped, at most max
// runes kept, and "-" for the empty string.
func cell(s string, max int) string {
	if s == "" {
		return "-"
	}
	return escapeText(s, max)
}

// escapeText escapes s as cell does, keeping at most max runes (max <= 0: all),
// with "…" where it was cut.
func escapeText(s string, max int) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		if max > 0 && n >= max {
			b.WriteString("…")
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || r == '\u200e' || r == '\u200f' ||
			(r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069'):
			// Controls, and the line separators and bidi overrides that would make the
			// text read otherwise than it is.
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
		i += size
		n++
	}
	return b.String()
}

// previewBytes is how much of stored bytes (a result, a payload) a preview shows.
const previewBytes = 64

// preview shows stored bytes safely, as the admin API does: their size and at most
// previewBytes of them, as text when they are valid UTF-8 (escaped when printed to
// a table), else as hex; Full (base64 in JSON) only when asked for.
type preview struct {
	Size      int    `json:"size"`
	Encoding  string `json:"encoding"` // "text" or "hex"
	Preview   string `json:"preview"`
	Truncated bool   `json:"truncated"`
	Full      []byte `json:"full,omitempty"`
}

func newPreview(b []byte, full bool) preview {
	p := preview{Size: len(b), Encoding: "text"}
	head := b
	if len(head) > previewBytes {
		head, p.Truncated = head[:previewBytes], true
		for i := 0; i < utf8.UTFMax-1 && len(head) > 0 && !utf8.Valid(head); i++ {
			head = head[:len(head)-1]
		}
	}
	if utf8.Valid(head) {
		p.Preview = string(head)
	} else {
		p.Encoding, p.Preview = "hex", hex.EncodeToString(b[:min(len(b), previewBytes)])
	}
	if full {
		p.Full = b
		if p.Full == nil {
			p.Full = []byte{}
		}
	}
	return p
}

// String is the preview as a table shows it: escaped, with its size, and an
// encoding other than text (hex, base64) named before it.
func (p preview) String() string {
	if p.Size == 0 {
		return "(empty)"
	}
	s := escapeText(p.Preview, 0)
	if p.Encoding != "text" && p.Encoding != "utf-8" {
		s = p.Encoding + ":" + s
	}
	if p.Truncated {
		s += "…"
	}
	return fmt.Sprintf("%s (%d bytes)", s, p.Size)
}

// fullText is the whole of b for a terminal: escaped text when it is UTF-8, else hex.
func fullText(b []byte) string {
	if utf8.Valid(b) {
		return escapeText(string(b), 0)
	}
	return "hex:" + hex.EncodeToString(b)
}

// when formats a time for a table: UTC, to the second, "-" when zero.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
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

// maxNote bounds --reason and --note, as the packages do.
const maxNote = 1024

// checkNote checks a required --reason or --note.
func (m *Main) checkNote(cmd, flagName, text string) error {
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
	return time.Time{}, fmt.Errorf("--%s %q: use an RFC 3339 time (2026-01-02T15:04:05Z) or a duration before now (90m, 24h)", name, cell(s, 64))
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
			return fmt.Errorf("%q is not an id: use the positive integer a list shows", cell(part, 32))
		}
		if len(*l) >= 1000 {
			return errors.New("more than 1000 ids: act in batches")
		}
		*l = append(*l, id)
	}
	return nil
}

// oneID checks that ids holds exactly one id.
func (m *Main) oneID(cmd string, ids idList) (int64, error) {
	if len(ids) != 1 {
		return 0, m.usagef(cmd, "--id is required, once: name one id (a list shows them)")
	}
	return ids[0], nil
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
func (m *Main) openOpsDB(ctx context.Context, cmd, raw string, sets ...migrate.Set) (idemsql.TxDB[*sql.Tx], func(), error) {
	if raw == "" {
		return idemsql.TxDB[*sql.Tx]{}, nil, m.usagef(cmd, "--db is required: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or sqlite:PATH")
	}
	if path, ok := strings.CutPrefix(raw, "sqlite:"); ok && path != "" {
		if _, err := os.Stat(path); err != nil {
			return idemsql.TxDB[*sql.Tx]{}, nil, fmt.Errorf("--db %s: %s: name the file your service uses", redactURL(raw), fileProblem(err))
		}
	}
	db, closeDB, err := openMigrateDB(ctx, raw)
	if err != nil {
		return db, nil, err
	}
	if err := migrate.Require(ctx, db, sets...); err != nil {
		closeDB()
		return db, nil, fmt.Errorf("--db %s: %w", redactURL(raw), err)
	}
	return db, closeDB, nil
}
