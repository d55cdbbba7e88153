package idempg_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/cursor"
)

func TestInspectorSuite(t *testing.T) {
	t.Parallel()
	t.Run("pgx", func(t *testing.T) {
		t.Parallel()
		idemtest.InspectorSuite(t, func(t *testing.T) idem.Store { s, _ := newStore(t, idempg.Config{}); return s })
	})
	t.Run("database_sql", func(t *testing.T) {
		t.Parallel()
		idemtest.InspectorSuite(t, func(t *testing.T) idem.Store { s, _ := newSQLStore(t, idempg.Config{}); return s })
	})
}

// TestListPlanUsesPrimaryKey proves that a List page costs a range of the primary
// key, not a scan of the table: on 200,000 records of one scope (plus another scope),
// analyzed, the plan of a page in the middle is an index scan of idem_records_pkey
// with no Seq Scan and no Sort. The plan it printed:
//
//	Limit  (cost=0.42..9.17 rows=101 width=40)
//	  ->  Index Scan using idem_records_pkey on idem_records  (cost=0.42..9403.63 rows=108595 width=40)
//	        Index Cond: ((scope = 'big'::text) AND (id > 'key-0100000'::text))
//
// It runs in about a second.
func TestListPlanUsesPrimaryKey(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t, idempg.Config{})
	ctx := ctxFor(t)
	execAll(t, ctx, pool,
		`INSERT INTO idem_records (scope, id, state, fingerprint, token, result, retention, created_at, expires_at)
		SELECT CASE WHEN g <= 200000 THEN 'big' ELSE 'other' END, 'key-' || lpad(g::text, 7, '0'), 2, '', g, '',
			interval '1 hour', now(), now() + interval '1 hour'
		FROM generate_series(1, 220000) AS g`,
		`ANALYZE idem_records`,
	)
	plan := queryPlan(t, ctx, pool, "EXPLAIN "+idempg.ListQuery(s), "big", "key-0100000", 101)
	t.Logf("plan:\n%s", plan)
	if !strings.Contains(plan, "Index Scan using idem_records_pkey") && !strings.Contains(plan, "Index Only Scan using idem_records_pkey") {
		t.Errorf("List's plan does not scan the primary key:\n%s", plan)
	}
	if strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Sort") {
		t.Errorf("List's plan scans the table or sorts:\n%s", plan)
	}
	// And the page itself is the 100 ids after the cursor.
	page, err := s.List(ctx, "big", cursor.EncodeID("key-0100000"), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 100 || page.Records[0].Key.ID != "key-0100001" || page.Records[99].Key.ID != "key-0100100" ||
		page.Next != cursor.EncodeID("key-0100100") {
		t.Fatalf("page after key-0100000: %d records, %v … , next %q", len(page.Records), page.Records[0].Key, page.Next)
	}
}
