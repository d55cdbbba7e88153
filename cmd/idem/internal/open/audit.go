package open

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/audit"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/redact"
)

// ConsumerSpec is one --consumer NAME=TOPIC[,TOPIC...][@DB-URL] of idem audit and
// idem admin: an inbox consumer, the outbox topics it reads, and the database of
// its keys and dead letters ("" for the producer's, --db).
type ConsumerSpec struct {
	Name   string
	Topics []string
	DB     string // raw URL, "" for --db
}

// ConsumerSyntax is the form of --consumer, for help texts and errors.
const ConsumerSyntax = "NAME=TOPIC[,TOPIC...][@DB-URL]"

// ParseConsumer parses a --consumer value. It splits on the first '=' (a
// consumer name has none) and on the last '@' that starts a database URL
// (@sqlite:, @postgres://, @postgresql://, @mysql://): a topic may hold an '@'
// that no scheme follows, and the URL's own '@' (user@host) comes after the one
// that starts it. Its errors name the flag and the fix, and never quote a
// password.
func ParseConsumer(v string) (ConsumerSpec, error) {
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return ConsumerSpec{}, errors.New(redact.String(fmt.Sprintf("--consumer %q: no consumer name: use %s, such as billing=orders,refunds or billing=orders@postgres://…/billing", v, ConsumerSyntax)))
	}
	var s ConsumerSpec
	s.Name = name
	topics := rest
	for i := len(rest) - 1; i >= 0; i-- {
		if rest[i] == '@' && DialectOf(rest[i+1:]) != "" {
			topics, s.DB = rest[:i], rest[i+1:]
			break
		}
	}
	if err := (idem.Key{Scope: name, ID: "x"}).Validate(); err != nil {
		return s, fmt.Errorf("--consumer %s: %q is not a consumer name: give its inbox.Config.Consumer", redact.String(v), name)
	}
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t == "" {
			return s, errors.New(redact.String(fmt.Sprintf("--consumer %s: an empty topic: list the outbox topics consumer %s reads, comma-separated, after the '='", v, name)))
		}
		if !slices.Contains(s.Topics, t) {
			s.Topics = append(s.Topics, t)
		}
	}
	if s.DB != "" {
		if err := cli.CheckURL("--consumer", s.DB); err != nil {
			return s, fmt.Errorf("--consumer %s: %w", name, err)
		}
		if DialectOf(s.DB) == "sqlite" {
			path := strings.TrimPrefix(s.DB, "sqlite:")
			if _, err := os.Stat(path); path == "" || err != nil {
				why := "no path"
				if err != nil {
					why = cli.FileProblem(err)
				}
				return s, fmt.Errorf("--consumer %s: @sqlite:PATH: %s: name the SQLite file the consumer keeps its keys in", name, why)
			}
		}
	}
	return s, nil
}

// ConsumerFlags is a repeatable --consumer flag. Set keeps each value as given:
// Specs parses them after the command line is read, where an error can be
// redacted (the flag package quotes the value).
type ConsumerFlags []string

func (f *ConsumerFlags) String() string { return redact.String(strings.Join(*f, " ")) }

// Set records one --consumer value.
func (f *ConsumerFlags) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// Specs parses every value; a consumer named twice is an error.
func (f ConsumerFlags) Specs() ([]ConsumerSpec, error) {
	out := make([]ConsumerSpec, 0, len(f))
	for _, v := range f {
		s, err := ParseConsumer(v)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(out, func(o ConsumerSpec) bool { return o.Name == s.Name }) {
			return nil, fmt.Errorf("--consumer %s is given twice: give each consumer once, with all its topics (%s)", s.Name, ConsumerSyntax)
		}
		out = append(out, s)
	}
	return out, nil
}

// AuditFlags are the flags of the audit shared by idem audit and idem admin:
// how each consumer is read.
type AuditFlags struct {
	RecordsTable string        // --records-table
	Retention    time.Duration // --retention
}

// Auditor opens the producer's database db (--db) and the consumers' (each
// spec's DB, or db), and returns the Auditor of cfg over them; close releases
// the connections. It runs no DDL: the outbox's and the inbox's migrations must
// be applied.
func Auditor(ctx context.Context, db string, specs []ConsumerSpec, f AuditFlags, cfg audit.Config) (a *audit.Auditor, close func(), err error) {
	dbs := map[string]idemsql.TxDB[*sql.Tx]{}
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	defer func() {
		if err != nil {
			closeAll() // close is nil: the return set it
		}
	}()
	get := func(raw, flag string) (idemsql.TxDB[*sql.Tx], error) {
		if d, ok := dbs[raw]; ok {
			return d, nil
		}
		d, c, err := sqlDB(ctx, flag, raw)
		if err != nil {
			return d, err
		}
		closers = append(closers, c)
		dbs[raw] = d
		return d, nil
	}
	producer, err := get(db, "--db")
	if err != nil {
		return nil, nil, err
	}
	// One Side per database, in the order of the consumers given.
	var order []string
	byDB := map[string][]audit.Consumer{}
	for _, s := range specs {
		raw := s.DB
		if raw == "" {
			raw = db
		}
		if _, ok := byDB[raw]; !ok {
			order = append(order, raw)
		}
		byDB[raw] = append(byDB[raw], audit.Consumer{Name: s.Name, Topics: s.Topics, Table: f.RecordsTable, Retention: f.Retention})
	}
	sides := make([]*audit.Side, 0, len(order))
	for _, raw := range order {
		d, err := get(raw, "--consumer "+consumerNames(byDB[raw])+":")
		if err != nil {
			return nil, nil, err
		}
		side, err := audit.ConsumersIn(d, byDB[raw]...)
		if err != nil {
			return nil, nil, err
		}
		sides = append(sides, side)
	}
	a, err = audit.New(producer, cfg, sides...)
	if err != nil {
		return nil, nil, err
	}
	return a, closeAll, nil
}

func consumerNames(cs []audit.Consumer) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return strings.Join(names, ",")
}

// AuditRepairs lists up to limit repairs recorded in the outbox of db (--db),
// newest first.
func AuditRepairs(ctx context.Context, db string, limit int) ([]audit.Repair, error) {
	producer, close, err := SQLDB(ctx, db)
	if err != nil {
		return nil, err
	}
	defer close()
	return audit.ListRepairs(ctx, producer, 0, limit)
}
