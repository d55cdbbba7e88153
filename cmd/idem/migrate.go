package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

const migrateSynopsis = `Apply, roll back, show or print the schema idem keeps in a SQL database (the
records, outbox, dead letters, effects, sagas, stream and sequence tables).

  idem migrate up     --db URL      apply every pending migration
  idem migrate down   --db URL      roll back the newest applied migration (one step)
  idem migrate status --db URL      show the applied and pending versions
  idem migrate print  --dialect D   print the SQL, for goose, golang-migrate, atlas,
                                    flyway or psql; it records the versions that
                                    constructors with SkipMigrate check

URL is postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or
sqlite:PATH. Migrations run in one
transaction, under a lock, so several processes may run them at once; running
them again changes nothing.`

type migrateOptions struct {
	db, dialect, table, component string
	down                          bool
}

func (m *Main) runMigrate(ctx context.Context, args []string) error {
	fs := m.newFlagSet("migrate", migrateSynopsis)
	fs.Usage = func() {
		fmt.Fprintf(m.help(), "Usage: idem migrate up|down|status|print [flags]\n\n%s\n\nFlags:\n", migrateSynopsis)
		m.printFlags(fs)
	}
	var o migrateOptions
	fs.StringVar(&o.db, "db", "", "the database: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or sqlite:PATH")
	fs.StringVar(&o.dialect, "dialect", "", "print: postgres, sqlite or mysql (default: the dialect of --db)")
	fs.StringVar(&o.table, "table", "", "the records table's name, where it is not idem_records (PostgreSQL: idempg.Config.Table)")
	fs.StringVar(&o.component, "component", "", "only these components, comma-separated (records, outbox, inbox, effect, saga, stream, sequences, hilo)")
	fs.BoolVar(&o.down, "down", false, "print: the SQL that removes the schema instead")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fs.Usage()
			return flag.ErrHelp
		}
		fmt.Fprintln(m.Stderr, "idem migrate: name an action: up, down, status or print")
		fs.Usage()
		return cli.ErrUsage
	}
	action := args[0]
	if err := cli.Parse(fs, args[1:]); err != nil {
		return err
	}
	if action == "print" {
		return m.migratePrint(o)
	}
	if !slices.Contains([]string{"up", "down", "status"}, action) {
		fmt.Fprintf(m.Stderr, "idem migrate: unknown action %q: use up, down, status or print\n", action)
		return cli.ErrUsage
	}
	if o.db == "" {
		return errors.New("idem migrate " + action + ": --db is required: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or sqlite:PATH")
	}
	db, closeDB, err := open.SQLDB(ctx, o.db)
	if err != nil {
		return err
	}
	defer closeDB()
	sets, err := migrateSets(db.Dialect(), o)
	if err != nil {
		return err
	}
	switch action {
	case "up":
		return m.migrateUp(ctx, db, sets)
	case "down":
		return m.migrateDown(ctx, db, sets)
	default:
		return m.migrateStatus(ctx, db, sets)
	}
}

func (m *Main) migrateUp(ctx context.Context, db idemsql.TxDB[*sql.Tx], sets []migrate.Set) error {
	before, err := migrate.Status(ctx, db, sets...)
	if err != nil {
		return err
	}
	if err := migrate.Up(ctx, db, sets...); err != nil {
		return err
	}
	applied := 0
	for _, s := range before {
		for _, st := range s.Pending() {
			fmt.Fprintf(m.Stdout, "applied %-28s %s\n", s.Set, st.Name)
			applied++
		}
	}
	if applied == 0 {
		fmt.Fprintf(m.Stdout, "up to date: %d components\n", len(sets))
	}
	return nil
}

// migrateDown rolls back one step: the newest migration of the last set (in the
// order Up applies them) that has any.
func (m *Main) migrateDown(ctx context.Context, db idemsql.TxDB[*sql.Tx], sets []migrate.Set) error {
	states, err := migrate.Status(ctx, db, sets...)
	if err != nil {
		return err
	}
	for i := len(states) - 1; i >= 0; i-- {
		if states[i].Applied == 0 {
			continue
		}
		st, _, err := migrate.Down(ctx, db, states[i].Set)
		if err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "rolled back %-24s %s\n", states[i].Set, st.Name)
		return nil
	}
	fmt.Fprintln(m.Stdout, "nothing to roll back")
	return nil
}

func (m *Main) migrateStatus(ctx context.Context, db idemsql.TxDB[*sql.Tx], sets []migrate.Set) error {
	states, err := migrate.Status(ctx, db, sets...)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tNAME\tAPPLIED\tNEWEST\tPENDING")
	for _, s := range states {
		var pending []string
		for _, st := range s.Pending() {
			pending = append(pending, st.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", s.Component, s.Name, s.Applied, s.Newest, cmpOrDash(strings.Join(pending, ", ")))
	}
	return tw.Flush()
}

func cmpOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (m *Main) migratePrint(o migrateOptions) error {
	d, err := printDialect(o)
	if err != nil {
		return err
	}
	sets, err := migrateSets(d, o)
	if err != nil {
		return err
	}
	script, err := migrate.Script(d, o.down, sets...)
	if err != nil {
		return err
	}
	fmt.Fprint(m.Stdout, script)
	return nil
}

func printDialect(o migrateOptions) (idemsql.Dialect, error) {
	name := o.dialect
	if name == "" {
		name = open.DialectOf(o.db)
	}
	switch name {
	case "postgres", "postgresql":
		return idemsql.Postgres, nil
	case "sqlite":
		return idemsql.SQLite, nil
	case "mysql", "mariadb":
		return idemsql.MySQL, nil
	case "":
		return 0, errors.New("idem migrate print: --dialect is required (postgres, sqlite or mysql), or a --db to take it from")
	}
	return 0, fmt.Errorf("idem migrate print: --dialect %q: use postgres, sqlite or mysql", name)
}

// migrateSets returns the sets of d that o selects, the records set under o.table.
func migrateSets(d idemsql.Dialect, o migrateOptions) ([]migrate.Set, error) {
	all := migrate.All(d)
	want := map[string]bool{}
	for _, c := range strings.Split(o.component, ",") {
		if c = strings.TrimSpace(c); c != "" {
			want[c] = true
		}
	}
	var out []migrate.Set
	seen := map[string]bool{}
	for _, s := range all {
		if len(want) > 0 && !want[s.Component] {
			continue
		}
		seen[s.Component] = true
		if s.Component == "records" && o.table != "" {
			s = migrate.Records(o.table)
		}
		out = append(out, s)
	}
	for c := range want {
		if seen[c] {
			continue
		}
		var names []string
		for _, s := range all {
			names = append(names, s.Component)
		}
		return nil, fmt.Errorf("--component %q: %s has no such component; use %s", c, d, strings.Join(names, ", "))
	}
	return out, nil
}
