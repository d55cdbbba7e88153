package audit

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// Side is one database on the consumers' side and the consumers whose keys and
// dead letters it holds. The producer's database may be another one, of another
// kind: the audit joins them by message id, never by a query across them.
type Side struct {
	dialect   string
	consumers []Consumer
	// applied reads which of ids consumer c holds a key of: id → its record.
	applied func(ctx context.Context, c Consumer, ids []string) (map[string]record, error)
	// dead reads which of ids consumer c dead-lettered: id → dead_at (ms).
	dead func(ctx context.Context, c Consumer, ids []string) (map[string]int64, error)
	// hasKeys says whether c holds any key at all.
	hasKeys func(ctx context.Context, c Consumer) (bool, error)
}

// record is one key record as the audit reads it.
type record struct {
	done bool      // completed (applied); false: a claim in progress
	at   time.Time // the claim's time
}

// ConsumersIn returns the Side of db, holding consumers. Each consumer needs a
// Name and at least one topic; its Table and Retention have defaults. db's
// Driver must fill the audit's statements (RecordsSQL.Applied,
// InboxSQL.DeadLettered): idempg, idemsqlite and idemmysql do.
func ConsumersIn[Tx any](db idemsql.TxDB[Tx], consumers ...Consumer) (*Side, error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	if len(consumers) == 0 {
		return nil, &idem.InputError{Field: "audit.ConsumersIn consumers", Reason: "is empty", Fix: "name at least one consumer and its topics"}
	}
	seen := map[string]bool{}
	out := make([]Consumer, 0, len(consumers))
	for i, c := range consumers {
		field := fmt.Sprintf("audit.Consumer[%d]", i)
		c.Table = cmpOr(c.Table, migrate.DefaultRecordsTable)
		if c.Retention == 0 {
			c.Retention = DefaultRetention
		}
		if err := (idem.Key{Scope: c.Name, ID: "x"}).Validate(); err != nil {
			return nil, &idem.InputError{Field: field + ".Name", Reason: fmt.Sprintf("%q is not a consumer name: %v", c.Name, err), Fix: "give the consumer's inbox.Config.Consumer"}
		}
		if seen[c.Name] {
			return nil, &idem.InputError{Field: field + ".Name", Reason: fmt.Sprintf("%q is given twice", c.Name), Fix: "list each consumer once, with all its topics"}
		}
		seen[c.Name] = true
		if len(c.Topics) == 0 || slices.Contains(c.Topics, "") {
			return nil, &idem.InputError{Field: field + ".Topics", Reason: fmt.Sprintf("of %q is empty or holds an empty topic", c.Name), Fix: "list the outbox topics the consumer reads"}
		}
		if err := migrate.CheckName(db.Dialect(), migrate.Set{Component: "records", Name: c.Table}, field+".Table"); err != nil {
			return nil, err
		}
		if c.Retention < 0 {
			return nil, &idem.InputError{Field: field + ".Retention", Reason: fmt.Sprintf("is %v", c.Retention), Fix: "give the consumer's inbox.Config.Retention (0 for the inbox's default, 7 days)"}
		}
		c.Topics = slices.Clone(c.Topics)
		out = append(out, c)
	}
	recs, inbox := db.Driver.Records(), db.Driver.Inbox()
	if recs.Applied == nil || inbox.DeadLettered == nil {
		return nil, &idem.InputError{Field: "audit.ConsumersIn db", Reason: fmt.Sprintf("the %s driver has no audit statements (RecordsSQL.Applied, InboxSQL.DeadLettered)", db.Dialect()),
			Fix: "use a driver that fills them: idempg, idemsqlite, idemmysql"}
	}
	s := &Side{dialect: db.Dialect().String(), consumers: out}
	tables := map[string]idemsql.RecordsSQL{}
	for _, c := range out {
		if _, ok := tables[c.Table]; !ok {
			tables[c.Table] = recs.ForTable(c.Table)
		}
	}
	read := readerOf(db)
	s.applied = func(ctx context.Context, c Consumer, ids []string) (map[string]record, error) {
		q := tables[c.Table]
		out := make(map[string]record, len(ids))
		err := read.each(ctx, q.Applied(len(ids)), argsOf(c.Name, ids), func() { clear(out) }, func(rows idemsql.Rows) error {
			var (
				id    string
				state int64
				at    time.Time
				err   error
			)
			if q.TimeUnit == 0 {
				err = rows.Scan(&id, &state, &at)
			} else {
				var n int64
				err = rows.Scan(&id, &state, &n)
				at = time.Unix(0, n*int64(q.TimeUnit))
			}
			if err != nil {
				return err
			}
			out[id] = record{done: state == 2, at: at}
			return nil
		})
		return out, err
	}
	s.dead = func(ctx context.Context, c Consumer, ids []string) (map[string]int64, error) {
		out := make(map[string]int64)
		err := read.each(ctx, inbox.DeadLettered(len(ids)), argsOf(c.Name, ids), func() { clear(out) }, func(rows idemsql.Rows) error {
			var (
				id string
				at int64
			)
			if err := rows.Scan(&id, &at); err != nil {
				return err
			}
			out[id] = at
			return nil
		})
		return out, err
	}
	s.hasKeys = func(ctx context.Context, c Consumer) (bool, error) {
		q := tables[c.Table]
		found := false
		err := read.each(ctx, q.List, []any{c.Name, "", 1}, nil, func(idemsql.Rows) error {
			found = true
			return nil
		})
		return found, err
	}
	return s, nil
}

func argsOf(first string, ids []string) []any {
	args := make([]any, 0, len(ids)+1)
	args = append(args, first)
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
