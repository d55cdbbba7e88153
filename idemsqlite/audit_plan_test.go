package idemsqlite_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/migrate"
)

// TestAuditPlansUseIndexes: on tables of 20,000 rows, analyzed, each of the
// audit's reads searches an index and scans no table: a page of
// AuditPublished searches idem_outbox_published, whose entries end with the
// rowid (id), in the page's order (no temporary b-tree), DeadLettered
// idem_dead_letters_msg, Applied the records' primary key (the table, WITHOUT
// ROWID), RepairsOf idem_outbox_repairs_orig.
func TestAuditPlansUseIndexes(t *testing.T) {
	t.Parallel()
	const series = `WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 20000) `
	fill := []string{
		// One row in ten pending, the others published three to a millisecond.
		`INSERT INTO idem_outbox (msg_id, topic, part, headers, payload, created_at, available_at, published_at) ` + series +
			`SELECT 'm' || g, 'orders', g % 64, '{}', x'00', g, g, CASE WHEN g % 10 <> 0 THEN 1000 + g / 3 END FROM s`,
		`INSERT INTO idem_outbox_repairs (copy_id, orig_id, msg_id, topic, consumers, reason, repaired_at) ` + series +
			`SELECT 20000 + g, g * 7, 'm' || g * 7, 'orders', 'c1', 'missing', g FROM s WHERE g <= 2000`,
		// 20 consumers, half of each one's letters closed.
		`INSERT INTO idem_dead_letters (consumer, msg_id, topic, position, headers, payload, kind, reason, attempts, first_at, dead_at, replayed_at) ` + series +
			`SELECT 'c' || g % 20, 'm' || g, 'orders', '', '{}', x'00', 'permanent', 'refused', 1, g, g, CASE WHEN g % 2 = 0 THEN g END FROM s`,
		`INSERT INTO idem_records (scope, id, state, token, result, retention_ns, created_ns, expires_ns) ` + series +
			`SELECT 'c' || g % 20, 'm' || g, 2, g, x'', 0, g, g FROM s`,
		`ANALYZE`,
	}
	db := plansDB(t, []migrate.Set{migrate.Outbox, migrate.Inbox, migrate.Records(migrate.DefaultRecordsTable)}, fill...)
	recs := db.Driver.Records().ForTable(migrate.DefaultRecordsTable)
	for _, c := range []struct {
		field, stmt string
		args        []any
		search      string // the plan's step that reads the table
	}{
		{"OutboxSQL.AuditPublished", db.Driver.Outbox().AuditPublished, []any{int64(3000), int64(6000), int64(4000), 500},
			"SEARCH o USING INDEX idem_outbox_published (published_at>? AND published_at<?)"},
		{"InboxSQL.DeadLettered", db.Driver.Inbox().DeadLettered(3), []any{"c3", "m3", "m23", "m43"},
			"SEARCH idem_dead_letters USING INDEX idem_dead_letters_msg (consumer=? AND msg_id=?)"},
		{"RecordsSQL.Applied", recs.Applied(3), []any{"c3", "m3", "m23", "m43"},
			"SEARCH idem_records USING PRIMARY KEY (scope=? AND id=?)"},
		{"OutboxSQL.RepairsOf", db.Driver.Outbox().RepairsOf(3), []any{int64(7), int64(14), int64(21)},
			"SEARCH idem_outbox_repairs USING COVERING INDEX idem_outbox_repairs_orig (orig_id=?)"},
	} {
		text := queryPlan(t, db, c.stmt, c.args)
		if !strings.Contains(text, c.search) || strings.Contains(text, "SCAN ") || strings.Contains(text, "TEMP B-TREE FOR ORDER BY") {
			t.Errorf("%s plans no %s (or scans, or sorts its rows):\n%s", c.field, c.search, text)
		}
		t.Logf("%s:\n%s", c.field, text)
	}
}
