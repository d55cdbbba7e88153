package idempg_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/migrate"
)

// TestArrayStatementsReachRowsByKey: the statements that read or update many
// rows named by their keys in arrays (the fence's shared reads and finishes,
// the sagas' shared saves) reach their rows through an index on the key in the
// generic plan made on new, empty tables. pgx prepares each
// statement once per connection and Postgres switches to that generic plan after
// five runs; a join on unnest planned while the table was empty is a hash join
// over a sequential scan, kept as the table grows, until autovacuum's next pass
// makes Postgres plan it again. The benchmarks' tables, and a new deployment's,
// were read whole by every batch.
func TestArrayStatementsReachRowsByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := sqltest.Postgres(t)
	if err := migrate.Up(ctx, db, migrate.Effect, migrate.Saga); err != nil {
		t.Fatal(err)
	}
	fx, sg := db.Driver.Effect(), db.Driver.Saga()
	for _, c := range []struct {
		field, stmt, args, table string
		cond                     string // the plan's index condition on the key
	}{
		{"EffectSQL.GroupLook", fx.GroupLook, `'{a,b}', '{charge,charge}'`, "idem_effects", "Index Cond: ((key = k.key) AND (step = k.step))"},
		{"EffectSQL.GroupFinish", fx.GroupFinish,
			`'{a,b}', '{charge,charge}', '{1,1}', '{complete,complete}', '{"\\x00","\\x00"}', '{"",""}', '{1,1}'`, "idem_effects", "key = ANY ($1)"},
		{"SagaSQL.GroupSave", sg.GroupSave,
			`'{done,done}', '{1,1}', '{"",""}', '{1,1}', '{"",""}', '{0,0}', '{0,0}', '{1,1}', '{s1,s2}', '{1,1}'`, "idem_sagas", "Index Cond: (id = ANY ($9))"},
	} {
		text := genericPlan(t, db, c.stmt, c.args)
		t.Logf("%s:\n%s", c.field, text)
		if strings.Contains(text, "Seq Scan on "+c.table) || !strings.Contains(text, c.cond) {
			t.Errorf("%s does not reach %s by its key (%s) in its generic plan on a new table:\n%s", c.field, c.table, c.cond, text)
		}
	}
}

// genericPlan returns the plan Postgres caches for stmt once it is prepared and
// has run a few times, with args (SQL literals) as the values of one run.
func genericPlan(t *testing.T, db idemsql.TxDB[*sql.Tx], stmt, args string) string {
	t.Helper()
	var plan []string
	err := db.InTx(t.Context(), func(tx *sql.Tx) error {
		q := db.Querier(tx)
		for _, s := range []string{"SET LOCAL plan_cache_mode = force_generic_plan", "PREPARE array_plan AS " + stmt} {
			if _, err := q.Exec(t.Context(), s); err != nil {
				return err
			}
		}
		err := idemsql.EachRow(t.Context(), q, "EXPLAIN EXECUTE array_plan("+args+")", nil, func(rows idemsql.Rows) error {
			var line string
			err := rows.Scan(&line)
			plan = append(plan, line)
			return err
		})
		if err != nil {
			return err
		}
		_, err = q.Exec(t.Context(), "DEALLOCATE array_plan")
		return err
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, stmt)
	}
	return strings.Join(plan, "\n")
}
