package idempg_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/migrate"
)

// TestAuditPlansUseIndexes: on tables of 20,000 rows, analyzed, each of the
// audit's reads searches its index and scans no table: a page of
// AuditPublished seeks idem_outbox_published_id and reads it in order (no
// sort), DeadLettered probes idem_dead_letters_msg, Applied the records'
// primary key, RepairsOf idem_outbox_repairs_orig (the last three may sort the
// few rows they find, to group them). The newest publication (Stall) and the
// cleanup's range, which idem_outbox_published served before
// idem_outbox_published_id replaced it, read the new index.
func TestAuditPlansUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := sqltest.Postgres(t)
	if err := migrate.Up(ctx, db, migrate.Outbox, migrate.Inbox, migrate.Records(migrate.DefaultRecordsTable)); err != nil {
		t.Fatal(err)
	}
	fill := []string{
		// One row in ten pending, the others published three to a millisecond.
		`INSERT INTO idem_outbox (msg_id, topic, part, headers, payload, created_at, available_at, published_at)
			SELECT 'm' || g, 'orders', g % 64, '{}', '\x00', g, g, CASE WHEN g % 10 <> 0 THEN 1000 + g / 3 END
			FROM generate_series(1, 20000) g`,
		`INSERT INTO idem_outbox_repairs (copy_id, orig_id, msg_id, topic, consumers, reason, repaired_at)
			SELECT 20000 + g, g * 7, 'm' || g * 7, 'orders', 'c1', 'missing', g FROM generate_series(1, 2000) g`,
		// 20 consumers, half of each one's letters closed.
		`INSERT INTO idem_dead_letters (consumer, msg_id, topic, position, headers, payload, kind, reason, attempts, first_at, dead_at, replayed_at)
			SELECT 'c' || g % 20, 'm' || g, 'orders', '', '{}', '\x00', 'permanent', 'refused', 1, g, g, CASE WHEN g % 2 = 0 THEN g END
			FROM generate_series(1, 20000) g`,
		`INSERT INTO idem_records (scope, id, state, token, result, retention, created_at, expires_at)
			SELECT 'c' || g % 20, 'm' || g, 2, g, '', interval '1 hour', now(), now() + interval '1 hour' FROM generate_series(1, 20000) g`,
		`ANALYZE idem_outbox, idem_outbox_repairs, idem_dead_letters, idem_records`,
	}
	for _, stmt := range fill {
		if err := db.Auto(ctx, func(q idemsql.Querier) error { _, err := q.Exec(ctx, stmt); return err }); err != nil {
			t.Fatalf("%v\n%s", err, stmt)
		}
	}
	recs := db.Driver.Records().ForTable(migrate.DefaultRecordsTable)
	for _, c := range []struct {
		field, stmt string
		args        []any
		index       string
		cond        string // the index's condition names this column
		ordered     bool   // read in the index's order: no sort
	}{
		{"OutboxSQL.AuditPublished", db.Driver.Outbox().AuditPublished, []any{int64(3000), int64(6000), int64(4000), 500}, "idem_outbox_published_id", "published_at", true},
		{"InboxSQL.DeadLettered", db.Driver.Inbox().DeadLettered(3), []any{"c3", "m3", "m23", "m43"}, "idem_dead_letters_msg", "msg_id", false},
		{"RecordsSQL.Applied", recs.Applied(3), []any{"c3", "m3", "m23", "m43"}, "idem_records_pkey", "id", false},
		{"OutboxSQL.RepairsOf", db.Driver.Outbox().RepairsOf(3), []any{int64(7), int64(14), int64(21)}, "idem_outbox_repairs_orig", "orig_id", false},
	} {
		plan := explain(t, db, c.stmt, c.args)
		if !strings.Contains(plan, "Index") || !strings.Contains(plan, " on "+c.index) && !strings.Contains(plan, "using "+c.index) ||
			!strings.Contains(plan, "Index Cond: ") || !strings.Contains(plan, c.cond) || strings.Contains(plan, "Seq Scan") || c.ordered && strings.Contains(plan, "Sort") {
			t.Errorf("%s plans no search of %s by %s (or scans a table, or sorts what it reads):\n%s", c.field, c.index, c.cond, plan)
		}
		t.Logf("%s:\n%s", c.field, plan)
	}
	// What idem_outbox_published served, before idem_outbox_published_id
	// replaced it. (How the rest of these statements reads is theirs.)
	for _, c := range []struct {
		field, stmt, want string
		args              []any
	}{
		{"OutboxSQL.Stall", db.Driver.Outbox().Stall, "Index Only Scan Backward using idem_outbox_published_id", nil},
		{"OutboxSQL.Cleanup", db.Driver.Outbox().Cleanup, "Index Scan using idem_outbox_published_id", []any{int64(2000), 1000}},
	} {
		// A bitmap scan of the index is as good as a plain one.
		if plan := strings.ReplaceAll(explain(t, db, c.stmt, c.args), "Bitmap Index Scan on", "Index Scan using"); !strings.Contains(plan, c.want) {
			t.Errorf("%s plans no %s:\n%s", c.field, c.want, plan)
		}
	}
}

// explain returns the plan PostgreSQL chooses for stmt with args.
func explain(t *testing.T, db idemsql.TxDB[*sql.Tx], stmt string, args []any) string {
	t.Helper()
	var plan []string
	err := db.Auto(t.Context(), func(q idemsql.Querier) error {
		return idemsql.EachRow(t.Context(), q, "EXPLAIN "+stmt, args, func(rows idemsql.Rows) error {
			var line string
			plan = append(plan, "")
			err := rows.Scan(&line)
			plan[len(plan)-1] = line
			return err
		})
	})
	if err != nil {
		t.Fatalf("EXPLAIN: %v\n%s", err, stmt)
	}
	return strings.Join(plan, "\n")
}
