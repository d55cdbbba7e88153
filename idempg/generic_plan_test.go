package idempg_test

import (
	"database/sql"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/migrate"
)

// TestArrayStatementsReachRowsByKey: the statements that read or update many
// rows named by their keys in arrays (the fence's shared reads and finishes,
// the sagas' shared saves, the queue's retirements and extensions) reach their
// rows through an index on the key in the generic plan made on new, empty
// tables. pgx prepares each
// statement once per connection and Postgres switches to that generic plan after
// five runs; a join on unnest planned while the table was empty is a hash join
// over a sequential scan, kept as the table grows, until autovacuum's next pass
// makes Postgres plan it again. The benchmarks' tables, and a new deployment's,
// were read whole by every batch.
func TestArrayStatementsReachRowsByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := sqltest.Postgres(t)
	if err := migrate.Up(ctx, db, migrate.Effect, migrate.Saga, migrate.Queue); err != nil {
		t.Fatal(err)
	}
	fx, sg, qu := db.Driver.Effect(), db.Driver.Saga(), db.Driver.Queue()
	for _, c := range []struct {
		field, stmt, args, table string
		cond                     string // the plan's index condition on the key
	}{
		{"EffectSQL.GroupLook", fx.GroupLook, `'{a,b}', '{charge,charge}'`, "idem_effects", "Index Cond: ((key = k.key) AND (step = k.step))"},
		{"EffectSQL.GroupFinish", fx.GroupFinish,
			`'{a,b}', '{charge,charge}', '{1,1}', '{complete,complete}', '{"\\x00","\\x00"}', '{"",""}', '{1,1}'`, "idem_effects", "key = ANY ($1)"},
		{"SagaSQL.GroupSave", sg.GroupSave,
			`'{done,done}', '{1,1}', '{"",""}', '{1,1}', '{"",""}', '{0,0}', '{0,0}', '{1,1}', '{s1,s2}', '{1,1}'`, "idem_sagas", "Index Cond: (id = ANY ($9))"},
		{"QueueSQL.RetireArrays", qu.RetireArrays, `1, 'applied', '{1,2}', '{1,1}'`, "idem_queue", "Index Cond: (id = ANY ($3))"},
		{"QueueSQL.ExtendArrays", qu.ExtendArrays, `1, '{1,2}', '{1,1}'`, "idem_queue", "Index Cond: (id = ANY ($2))"},
	} {
		text := genericPlan(t, db, c.stmt, c.args)
		t.Logf("%s:\n%s", c.field, text)
		if strings.Contains(text, "Seq Scan on "+c.table) || !strings.Contains(text, c.cond) {
			t.Errorf("%s does not reach %s by its key (%s) in its generic plan on a new table:\n%s", c.field, c.table, c.cond, text)
		}
	}
}

// plans numbers the statements genericPlan prepares (a failed one stays
// prepared in its session).
var plans atomic.Int64

// genericPlan returns the plan Postgres caches for stmt once it is prepared and
// has run a few times, with args (SQL literals) as the values of one run.
func genericPlan(t *testing.T, db idemsql.TxDB[*sql.Tx], stmt, args string) string {
	t.Helper()
	var plan []string
	err := db.InTx(t.Context(), func(tx *sql.Tx) error {
		q := db.Querier(tx)
		name := fmt.Sprintf("generic_plan_%d", plans.Add(1))
		for _, s := range []string{"SET LOCAL plan_cache_mode = force_generic_plan", "PREPARE " + name + " AS " + stmt} {
			if _, err := q.Exec(t.Context(), s); err != nil {
				return err
			}
		}
		explain := "EXPLAIN EXECUTE " + name
		if args != "" {
			explain += "(" + args + ")"
		}
		err := idemsql.EachRow(t.Context(), q, explain, nil, func(rows idemsql.Rows) error {
			var line string
			err := rows.Scan(&line)
			plan = append(plan, line)
			return err
		})
		if err != nil {
			return err
		}
		_, err = q.Exec(t.Context(), "DEALLOCATE "+name)
		return err
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, stmt)
	}
	return strings.Join(plan, "\n")
}

// TestGenericPlansOnNewTables: every statement of the driver's families (the
// string fields of RecordsSQL, OutboxSQL, InboxSQL, EffectSQL, SagaSQL,
// StreamSQL, SeqSQL, QueueSQL), in the generic plan made on new, empty tables,
// scans none of idem's tables, except the maintenance statements listed with
// their reason. A new statement that joins or filters in a way only a table
// scan serves on a new table fails here: see TestArrayStatementsReachRowsByKey
// for why that plan lasts. The values are all NULL: a generic plan does not
// depend on them.
func TestGenericPlansOnNewTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := sqltest.Postgres(t)
	if err := migrate.Up(ctx, db, migrate.Outbox, migrate.Queue, migrate.Inbox, migrate.Effect, migrate.Saga,
		migrate.Stream, migrate.Sequences, migrate.Records(migrate.DefaultRecordsTable)); err != nil {
		t.Fatal(err)
	}
	// Statements a table scan serves well enough on a new table, and why.
	scans := map[string]string{
		"RecordsSQL.Sweep":             "a sweep's batch: a new table has nothing past its retention, and autovacuum plans it again long before",
		"OutboxSQL.Cleanup":            "the same, for published messages",
		"EffectSQL.Sweep":              "the same, for finished effects",
		"EffectSQL.SweepKeepingSagas":  "the same",
		"QueueSQL.Sweep":               "the same, for finished messages",
		"StreamSQL.TrimOld":            "the same, for old events",
		"StreamSQL.TrimAcked":          "the same, for acknowledged events",
		"StreamSQL.ForgetIdleClients":  "the same, for idle clients (one row a client)",
		"StreamSQL.ForgetExtraClients": "the same, beyond the bound of clients",
		"OutboxSQL.DeleteStaleRelays":  "one row a relay process",
		"QueueSQL.ListFinished":        "an operator's listing, one page at a time",
		"SagaSQL.IDs":                  "an operator's listing, one page at a time",
	}
	d := db.Driver
	recs := d.Records().ForTable(migrate.DefaultRecordsTable)
	params := regexp.MustCompile(`\$(\d+)`)
	checked, seen := 0, map[string]bool{}
	for _, family := range []any{&recs, d.Outbox(), d.Inbox(), d.Effect(), d.Saga(), d.Stream(), d.Seq(), d.Queue()} {
		v := reflect.ValueOf(family).Elem()
		for i := range v.NumField() {
			if v.Field(i).Kind() != reflect.String || v.Field(i).String() == "" {
				continue
			}
			field, stmt := v.Type().Name()+"."+v.Type().Field(i).Name, v.Field(i).String()
			n := 0
			for _, m := range params.FindAllStringSubmatch(stmt, -1) {
				var k int
				if _, err := fmt.Sscan(m[1], &k); err == nil {
					n = max(n, k)
				}
			}
			plan := genericPlan(t, db, stmt, strings.TrimSuffix(strings.Repeat("NULL,", n), ","))
			checked++
			seen[field] = true
			if _, ok := scans[field]; !ok && strings.Contains(plan, "Seq Scan on idem_") {
				t.Errorf("%s scans a table in its generic plan on new tables:\n%s\n%s", field, plan, stmt)
			}
		}
	}
	for field := range scans {
		if !seen[field] {
			t.Errorf("scans names %s, which is no statement: correct the list", field)
		}
	}
	if checked < 100 {
		t.Errorf("checked %d statements, want the families' 100 or more", checked)
	}
	t.Logf("%d statements checked", checked)
}
