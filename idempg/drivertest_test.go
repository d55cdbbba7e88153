package idempg_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/migrate"
	"github.com/jackc/pgx/v5"
)

// TestDriver runs the suite every idemsql.Driver must pass on this one, a fresh
// database per family.
func TestDriver(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) idemsql.TxDB[*sql.Tx] { return sqltest.Postgres(t) })
}

// TestDriverPgx runs the families a pgx store runs (its records) over pgx.
func TestDriverPgx(t *testing.T) {
	drivertest.Records(t, func(t *testing.T) idemsql.TxDB[pgx.Tx] { return idempg.TxDB(testsvc.PostgresPool(t)) })
}

// TestCountOpenDeadLettersUsesIndex: the count the inbox polls for
// idem_inbox_dead_letters_open searches the index of open letters by consumer
// (idem_dead_letters_open), reading no closed letter (no Filter) and not the whole
// table. The planner is told to avoid a
// sequential scan (a few rows would make one the cheapest); it still chooses one
// if no index can serve the count.
func TestCountOpenDeadLettersUsesIndex(t *testing.T) {
	t.Parallel()
	db := sqltest.Postgres(t)
	if err := migrate.Ensure(t.Context(), db, false, migrate.Inbox); err != nil {
		t.Fatal(err)
	}
	var plan []string
	err := db.InTx(t.Context(), func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(t.Context(), "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		rows, err := tx.QueryContext(t.Context(), "EXPLAIN "+db.Driver.Inbox().CountOpenDeadLetters, "c1", 1000)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				return err
			}
			plan = append(plan, line)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "idem_dead_letters_open") || !strings.Contains(text, "Index Cond: (consumer = ") ||
		strings.Contains(text, "Seq Scan") || strings.Contains(text, "Filter") {
		t.Errorf("CountOpenDeadLetters plans no search of idem_dead_letters_open by consumer:\n%s", text)
	}
}
