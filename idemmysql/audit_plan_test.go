package idemmysql_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/migrate"
)

// TestAuditPlansUseIndexes: on tables of 20,000 rows, analyzed, each of the
// audit's reads searches an index and scans no table: a page of
// AuditPublished is a range of idem_outbox_published, whose entries end with
// the primary key (id), read in the page's order (no filesort: through
// idem_outbox_pending, which also leads with published_at, it sorted the rest of
// the window); DeadLettered a range of idem_dead_letters_msg, Applied of the
// records' primary key, RepairsOf of idem_outbox_repairs_orig (DeadLettered
// sorts the few rows it finds, to group them). It needs MariaDB
// (its seq_1_to_N table fills the tables). EXPLAIN printed (MariaDB 10.11), for
// AuditPublished:
//
//	o: type range, key idem_outbox_published, Extra: Using index condition
//	r: type eq_ref, key PRIMARY
func TestAuditPlansUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	sdb := testsvc.MySQLDB(t)
	db := idemmysql.TxDB(sdb)
	if err := migrate.Up(ctx, db, migrate.Outbox, migrate.Inbox, migrate.Records(migrate.DefaultRecordsTable)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		// One row in ten pending, the others published three to a millisecond.
		`INSERT INTO idem_outbox (msg_id, topic, part, headers, payload, created_at, available_at, published_at)
			SELECT CONCAT('m', seq), 'orders', seq % 64, '{}', x'00', seq, seq, IF(seq % 10 <> 0, 1000 + seq DIV 3, NULL)
			FROM seq_1_to_20000`,
		`INSERT INTO idem_outbox_repairs (copy_id, orig_id, msg_id, topic, consumers, reason, repaired_at)
			SELECT 20000 + seq, seq * 7, CONCAT('m', seq * 7), 'orders', 'c1', 'missing', seq FROM seq_1_to_2000`,
		// 20 consumers, half of each one's letters closed.
		`INSERT INTO idem_dead_letters (consumer, msg_id, topic, position, headers, payload, kind, reason, attempts, first_at, dead_at, replayed_at)
			SELECT CONCAT('c', seq % 20), CONCAT('m', seq), 'orders', '', '{}', x'00', 'permanent', 'refused', 1, seq, seq, IF(seq % 2 = 0, seq, NULL)
			FROM seq_1_to_20000`,
		`INSERT INTO idem_records (scope, id, state, token, result, retention_us, created_us, expires_us)
			SELECT CONCAT('c', seq % 20), CONCAT('m', seq), 2, seq, '', 0, seq, seq FROM seq_1_to_20000`,
		`ANALYZE TABLE idem_outbox, idem_outbox_repairs, idem_dead_letters, idem_records`,
	} {
		if _, err := sdb.ExecContext(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	recs := db.Driver.Records().ForTable(migrate.DefaultRecordsTable)
	for _, c := range []struct {
		field, stmt  string
		args         []any
		table, index string // the table the plan reads through the index
		ordered      bool   // read in the index's order: no sort
	}{
		{"OutboxSQL.AuditPublished", db.Driver.Outbox().AuditPublished, []any{int64(3000), int64(6000), int64(4000), 500}, "o", "idem_outbox_published", true},
		{"InboxSQL.DeadLettered", db.Driver.Inbox().DeadLettered(3), []any{"c3", "m3", "m23", "m43"}, "idem_dead_letters", "idem_dead_letters_msg", false},
		{"RecordsSQL.Applied", recs.Applied(3), []any{"c3", "m3", "m23", "m43"}, "idem_records", "PRIMARY", false},
		{"OutboxSQL.RepairsOf", db.Driver.Outbox().RepairsOf(3), []any{int64(7), int64(14), int64(21)}, "idem_outbox_repairs", "idem_outbox_repairs_orig", false},
	} {
		plan := explainMySQL(t, sdb, c.stmt, c.args)
		var text []string
		found := false
		for _, step := range plan {
			text = append(text, fmt.Sprintf("%s: type %s, key %s, rows %s, Extra: %s", step["table"], step["type"], step["key"], step["rows"], step["Extra"]))
			if step["type"] == "ALL" || step["type"] == "index" || c.ordered && strings.Contains(step["Extra"], "filesort") {
				t.Errorf("%s scans %s, or sorts what it reads: %s", c.field, step["table"], text[len(text)-1])
			}
			if step["table"] == c.table && step["key"] == c.index && step["type"] != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("%s reads %s through no %s:\n%s", c.field, c.table, c.index, strings.Join(text, "\n"))
		}
		t.Logf("%s:\n%s", c.field, strings.Join(text, "\n"))
	}
}

// explainMySQL returns the steps of the plan of stmt with args, each by column
// name (table, type, key, rows, Extra…).
func explainMySQL(t *testing.T, db *sql.DB, stmt string, args []any) []map[string]string {
	t.Helper()
	q, args := idemsql.Rebind("EXPLAIN "+stmt, args)
	rows, err := db.QueryContext(t.Context(), q, args...)
	if err != nil {
		t.Fatalf("EXPLAIN: %v\n%s", err, stmt)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		step := map[string]string{}
		for i, c := range cols {
			step[c] = vals[i].String
		}
		out = append(out, step)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
