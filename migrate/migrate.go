package migrate

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

//go:embed sql
var files embed.FS

// Set is one line of migrations: the tables of one component, recorded in
// idem_migrations under Name.
type Set struct {
	// Component is the directory of its migrations: records, outbox, queue, inbox, effect,
	// saga, stream, sequences or hilo.
	Component string
	// Name is what the set is recorded under (the component column of
	// idem_migrations): its table, or the prefix of its tables. Only the PostgreSQL
	// records table takes another name (idempg.Config.Table); a migration of such a
	// set creates the table under that name.
	Name string
}

func (s Set) String() string { return s.Component + " (" + s.Name + ")" }

// The sets under their default names.
var (
	Outbox    = Set{Component: "outbox", Name: "idem_outbox"}
	Queue     = Set{Component: "queue", Name: "idem_queue"}
	Inbox     = Set{Component: "inbox", Name: "idem_dead_letters"}
	Effect    = Set{Component: "effect", Name: "idem_effects"}
	Saga      = Set{Component: "saga", Name: "idem_sagas"}
	Stream    = Set{Component: "stream", Name: "idem_stream"}
	Sequences = Set{Component: "sequences", Name: "idem_sequences"}
	HiLo      = Set{Component: "hilo", Name: "idem_hilo"}
)

// DefaultRecordsTable is the records table's name when none is configured.
const DefaultRecordsTable = "idem_records"

// Records is the set of idem.Store's records table named table.
func Records(table string) Set { return Set{Component: "records", Name: table} }

// order is the order Up applies sets in and `idem migrate down` rolls them back in
// reverse.
var order = []string{"records", "outbox", "queue", "inbox", "effect", "saga", "stream", "sequences", "hilo"}

// All returns every set d has, under its default name: what `idem migrate up`
// applies.
func All(d idemsql.Dialect) []Set {
	var out []Set
	for _, c := range order {
		if _, err := fs.Stat(files, path.Join("sql", d.String(), c)); err != nil {
			continue
		}
		s := Set{Component: c, Name: DefaultRecordsTable}
		for _, known := range []Set{Outbox, Queue, Inbox, Effect, Saga, Stream, Sequences, HiLo} {
			if known.Component == c {
				s = known
			}
		}
		out = append(out, s)
	}
	return out
}

// Step is one migration of a set.
type Step struct {
	Version int
	Name    string // NNN_description, as recorded in idem_migrations
	Up      string // the SQL, names filled in
	Down    string
}

// nameRE is what a configurable name may be: a lowercase identifier, short enough
// that the longest name derived from it (Name+"_expires_at_idx") fits PostgreSQL's
// 63 bytes, so no name is silently truncated.
var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// MaxNameLen is the longest configurable name.
const MaxNameLen = 63 - len("_expires_at_idx")

// Steps returns the migrations of s in d, in version order, with its name filled in.
func Steps(d idemsql.Dialect, s Set) ([]Step, error) {
	dir := path.Join("sql", d.String(), s.Component)
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, &idem.InputError{Field: "component", Reason: fmt.Sprintf("%q has no %s migrations", s.Component, d),
			Fix: "use one of " + strings.Join(components(d), ", ")}
	}
	byVersion := map[int]*Step{}
	templated := false
	for _, e := range entries {
		file := e.Name()
		base, dirn, ok := strings.Cut(strings.TrimSuffix(file, ".sql"), ".")
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || (dirn != "up" && dirn != "down") {
			return nil, fmt.Errorf("migrate: %s/%s is not named NNN_description.up.sql or .down.sql", dir, file)
		}
		body, err := fs.ReadFile(files, path.Join(dir, file))
		if err != nil {
			return nil, err
		}
		st := byVersion[v]
		if st == nil {
			st = &Step{Version: v, Name: base}
			byVersion[v] = st
		} else if st.Name != base {
			return nil, fmt.Errorf("migrate: %s and %s share version %d", st.Name, base, v)
		}
		templated = templated || strings.Contains(string(body), "{{table}}")
		sql := strings.ReplaceAll(string(body), "{{table}}", s.Name)
		if dirn == "up" {
			st.Up = sql
		} else {
			st.Down = sql
		}
	}
	if err := checkName(d, s, templated); err != nil {
		return nil, err
	}
	steps := make([]Step, 0, len(byVersion))
	for _, st := range byVersion {
		if st.Up == "" || st.Down == "" {
			return nil, fmt.Errorf("migrate: %s/%s needs both an .up.sql and a .down.sql", dir, st.Name)
		}
		steps = append(steps, *st)
	}
	slices.SortFunc(steps, func(a, b Step) int { return a.Version - b.Version })
	return steps, nil
}

// checkName refuses a name the set cannot take: another name than its default where
// the migrations do not take one, or a name that is not a safe identifier.
func checkName(d idemsql.Dialect, s Set, templated bool) error {
	def := ""
	for _, a := range All(d) {
		if a.Component == s.Component {
			def = a.Name
		}
	}
	switch {
	case !templated && s.Name != def:
		return &idem.InputError{Field: "table", Reason: fmt.Sprintf("is %q, but the %s tables on %s have a fixed name", s.Name, s.Component, d),
			Fix: fmt.Sprintf("leave it empty (%s)", def)}
	case !nameRE.MatchString(s.Name) || len(s.Name) > MaxNameLen:
		return &idem.InputError{Field: "table", Reason: fmt.Sprintf("%q is not a lowercase SQL identifier of at most %d bytes", s.Name, MaxNameLen),
			Fix: "use a-z, 0-9 and _, starting with a letter or _; choose the schema with the connection's search_path"}
	}
	return nil
}

// CheckName reports whether s can be migrated in d (its name a safe identifier, or
// its fixed one), as an *idem.InputError on field: for a Config whose field names
// the table.
func CheckName(d idemsql.Dialect, s Set, field string) error {
	_, err := Steps(d, s)
	var ie *idem.InputError
	if errors.As(err, &ie) {
		return &idem.InputError{Field: field, Reason: ie.Reason, Fix: ie.Fix}
	}
	return err
}

func components(d idemsql.Dialect) []string {
	var out []string
	for _, s := range All(d) {
		out = append(out, s.Component)
	}
	return out
}

// State is how far a set is applied in one database.
type State struct {
	Set
	Applied int    // the newest version recorded; 0 for none
	Newest  int    // the newest version this build has
	Steps   []Step // every step of the set
}

// Pending returns the steps not yet applied.
func (s State) Pending() []Step {
	var out []Step
	for _, st := range s.Steps {
		if st.Version > s.Applied {
			out = append(out, st)
		}
	}
	return out
}

// ErrBehind is what a *BehindError matches with errors.Is.
var ErrBehind = errors.New("idem schema is behind")

// BehindError is Require's answer when a set lacks a migration this build needs.
type BehindError struct {
	Dialect idemsql.Dialect
	Set     Set
	Applied int    // the newest version recorded
	Needed  int    // the newest version this build has
	Missing string // the first missing migration
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("idem schema: %s is at version %d and this build needs version %d (%s is missing): "+
		"run `idem migrate up --db <url>`, or apply the SQL of `idem migrate print --dialect %s` with your migration tool",
		e.Set, e.Applied, e.Needed, e.Missing, e.Dialect)
}

// Is makes errors.Is(err, ErrBehind) true.
func (e *BehindError) Is(target error) bool { return target == ErrBehind }

// Script returns the SQL that brings sets up from nothing, each migration followed by
// its idem_migrations row, for teams that apply migrations with their own tool. It
// is safe to apply more than once (every statement is IF NOT EXISTS, OR REPLACE or
// ON CONFLICT DO NOTHING); run it in one transaction. With down, it is the SQL that
// removes the sets and their rows instead, newest migration first. The driver of d
// must be registered (import its package).
func Script(d idemsql.Dialect, down bool, sets ...Set) (string, error) {
	drv, err := idemsql.DriverFor(d)
	if err != nil {
		return "", err
	}
	m := drv.Migrate()
	var b strings.Builder
	fmt.Fprintf(&b, "-- idem schema for %s, from `idem migrate print`.\n", d)
	if !down {
		b.WriteString(m.CreateTable + ";\n")
	}
	if down {
		sets = slices.Clone(sets)
		slices.Reverse(sets)
	}
	for _, s := range sets {
		steps, err := Steps(d, s)
		if err != nil {
			return "", err
		}
		if down {
			slices.Reverse(steps)
		}
		for _, st := range steps {
			fmt.Fprintf(&b, "\n-- %s %s\n", s, st.Name)
			if down {
				fmt.Fprintf(&b, "%s\n%s;\n", strings.TrimSpace(st.Down), literal(m.Forget, s.Name, st.Version))
				continue
			}
			fmt.Fprintf(&b, "%s\n%s;\n", strings.TrimSpace(st.Up),
				m.InsertIgnore("idem_migrations", "component, version, name", fmt.Sprintf("'%s', %d, '%s'", s.Name, st.Version, st.Name)))
		}
	}
	return b.String(), nil
}

// literal fills in the component ($1) and version ($2) of a statement of the
// migrate family, for a printed script. Both need no escaping: Steps checked the
// name, and the version is a number.
func literal(stmt, component string, version int) string {
	return strings.NewReplacer("$1", "'"+component+"'", "$2", strconv.Itoa(version)).Replace(stmt)
}
