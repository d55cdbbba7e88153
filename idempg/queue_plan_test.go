package idempg_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/migrate"
)

// TestQueuePlansUseIndexes: on an idem_queue of 20,000 rows, one in twenty
// unfinished, half of them with an ordering key, analyzed, the claim searches
// the partial index of unfinished rows by topic (idem_queue_due) and probes an
// ordering key's earlier rows through idem_queue_key; Lag counts from a partial
// index; Cancel finds its row through idem_queue_unique. None scans idem_queue.
func TestQueuePlansUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := sqltest.Postgres(t)
	if err := migrate.Up(ctx, db, migrate.Queue); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`INSERT INTO idem_queue (msg_id, topic, ordering_key, headers, payload, created_at, available_at, finished_at, outcome)
			SELECT 'm' || g, CASE WHEN g % 3 = 0 THEN 'mail' ELSE 'orders' END, CASE WHEN g % 2 = 0 THEN 'k' || g % 50 ELSE '' END,
				'{}', '\x00', g, g, CASE WHEN g % 20 <> 0 THEN g + 10 END, CASE WHEN g % 20 <> 0 THEN 'applied' ELSE '' END
			FROM generate_series(1, 20000) g`,
		`ANALYZE idem_queue`,
	} {
		if err := db.Auto(ctx, func(q idemsql.Querier) error { _, err := q.Exec(ctx, stmt); return err }); err != nil {
			t.Fatalf("%v\n%s", err, stmt)
		}
	}
	s := db.Driver.Queue()
	for _, c := range []struct {
		field, stmt string
		args        []any
		want        []string // the plan names these indexes
	}{
		{"QueueSQL.Claim", s.Claim, []any{int64(30000), int64(60000), "w", "orders", 32}, []string{"idem_queue_due", "idem_queue_key"}},
		{"QueueSQL.Lag", s.Lag, []any{"orders"}, []string{"idem_queue_"}},
		{"QueueSQL.Cancel", s.Cancel, []any{int64(30000), "why", "orders", "m40"}, []string{"idem_queue_unique"}},
	} {
		plan := explain(t, db, c.stmt, c.args)
		t.Logf("%s:\n%s", c.field, plan)
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s scans a table:\n%s", c.field, plan)
		}
		for _, idx := range c.want {
			if !strings.Contains(plan, idx) {
				t.Errorf("%s reads no %s:\n%s", c.field, idx, plan)
			}
		}
	}
}
