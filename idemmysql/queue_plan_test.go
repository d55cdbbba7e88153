package idemmysql_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/migrate"
)

// TestQueuePlansUseIndexes: on an idem_queue of 20,000 rows, one in twenty
// unfinished, half of them with an ordering key, analyzed, the claim's lock
// reads idem_queue_due by topic and unfinished, and probes an ordering key's
// earlier rows through idem_queue_key; Lag counts from an index; Cancel finds
// its row through idem_queue_unique. None scans idem_queue (type ALL or index).
func TestQueuePlansUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	sdb := testsvc.MySQLDB(t)
	db := idemmysql.TxDB(sdb)
	if err := migrate.Up(ctx, db, migrate.Queue); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO idem_queue (msg_id, topic, ordering_key, headers, payload, created_at, available_at, finished_at, outcome)
			SELECT CONCAT('m', seq), IF(seq % 3 = 0, 'mail', 'orders'), IF(seq % 2 = 0, CONCAT('k', seq % 50), ''),
				'{}', x'00', seq, seq, IF(seq % 20 <> 0, seq + 10, NULL), IF(seq % 20 <> 0, 'applied', '')
			FROM seq_1_to_20000`,
		`ANALYZE TABLE idem_queue`,
	} {
		if _, err := sdb.ExecContext(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	s := db.Driver.Queue()
	for _, c := range []struct {
		field, stmt string
		args        []any
		want        map[string]string // table alias → the index it is read through
	}{
		{"QueueSQL.ClaimLock", s.ClaimLock, []any{int64(30000), "orders", 32}, map[string]string{"c": "idem_queue_due", "e": "idem_queue_key"}},
		{"QueueSQL.Lag", s.Lag, []any{"orders"}, map[string]string{"idem_queue": "idem_queue_"}},
		{"QueueSQL.Cancel", s.Cancel, []any{int64(30000), "why", "orders", "m40"}, map[string]string{"idem_queue": "idem_queue_unique"}},
	} {
		plan := explainMySQL(t, sdb, c.stmt, c.args)
		var text []string
		found := map[string]bool{}
		for _, step := range plan {
			text = append(text, fmt.Sprintf("%s: type %s, key %s, rows %s, Extra: %s", step["table"], step["type"], step["key"], step["rows"], step["Extra"]))
			if step["type"] == "ALL" || step["type"] == "index" {
				t.Errorf("%s scans %s: %s", c.field, step["table"], text[len(text)-1])
			}
			if idx, ok := c.want[step["table"]]; ok && strings.HasPrefix(step["key"], idx) {
				found[step["table"]] = true
			}
		}
		for table, idx := range c.want {
			if !found[table] {
				t.Errorf("%s reads %s through no %s:\n%s", c.field, table, idx, strings.Join(text, "\n"))
			}
		}
		t.Logf("%s:\n%s", c.field, strings.Join(text, "\n"))
	}
}
