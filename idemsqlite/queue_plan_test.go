package idemsqlite_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/migrate"
)

// TestQueuePlansUseIndexes: on an idem_queue of 20,000 rows, one in twenty
// unfinished, half of them with an ordering key, analyzed, the claim searches
// idem_queue_due by topic and probes an ordering key's earlier rows through
// idem_queue_key; Lag counts from a partial index; Cancel finds its row through
// idem_queue_unique. None scans idem_queue.
func TestQueuePlansUseIndexes(t *testing.T) {
	t.Parallel()
	db := plansDB(t, []migrate.Set{migrate.Queue},
		`INSERT INTO idem_queue (msg_id, topic, ordering_key, headers, payload, created_at, available_at, finished_at, outcome)
			WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 20000)
			SELECT 'm' || g, CASE WHEN g % 3 = 0 THEN 'mail' ELSE 'orders' END, CASE WHEN g % 2 = 0 THEN 'k' || g % 50 ELSE '' END,
				'{}', x'00', g, g, CASE WHEN g % 20 <> 0 THEN g + 10 END, CASE WHEN g % 20 <> 0 THEN 'applied' ELSE '' END FROM s`,
		`ANALYZE`,
	)
	s := db.Driver.Queue()
	for _, c := range []struct {
		field, stmt string
		args        []any
		want        []string // the plan's steps that read the table
	}{
		{"QueueSQL.Claim", s.Claim, []any{int64(30000), int64(60000), "w", "orders", 32},
			[]string{"SEARCH c USING INDEX idem_queue_due (topic=? AND available_at<?)", "SEARCH e USING INDEX idem_queue_key (topic=? AND ordering_key=? AND id<?)"}},
		{"QueueSQL.Lag", s.Lag, []any{"orders"}, []string{"SEARCH idem_queue USING INDEX idem_queue_due (topic=?)"}},
		{"QueueSQL.Cancel", s.Cancel, []any{int64(30000), "why", "orders", "m40"}, []string{"SEARCH idem_queue USING INDEX idem_queue_unique (topic=? AND msg_id=?)"}},
	} {
		text := queryPlan(t, db, c.stmt, c.args)
		t.Logf("%s:\n%s", c.field, text)
		if strings.Contains(text, "SCAN ") {
			t.Errorf("%s scans a table:\n%s", c.field, text)
		}
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s plans no %q:\n%s", c.field, w, text)
			}
		}
	}
}
