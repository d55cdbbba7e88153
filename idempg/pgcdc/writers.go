package pgcdc

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// checkWriters checks who may write what the relay publishes or parks: the relay's
// role must be able to park a message in the outbox table and, with
// Config.Messages, no role that may not insert into the outbox may write a WAL
// message (any role could otherwise have the relay publish what it likes: the
// relay cannot tell who wrote one). Every failure is a *SetupError.
func (r *Relay) checkWriters(ctx context.Context, conn *pgx.Conn) error {
	schema, table, err := r.qualified(ctx, conn)
	if err != nil {
		return err
	}
	full := pgx.Identifier{schema, table}.Sanitize()
	if err := r.checkParking(ctx, conn, schema, full); err != nil {
		return err
	}
	if !r.cfg.Messages {
		return nil
	}
	return r.checkEmitters(ctx, conn, full)
}

// checkParking checks that the relay's role may park messages (outbox.ParkTx): read
// and update the outbox's rows, insert new ones (with its id sequence) and record
// them in idem_outbox_cdc_parked, which the outbox's migration 003 creates.
func (r *Relay) checkParking(ctx context.Context, conn *pgx.Conn, schema, full string) error {
	parked := pgx.Identifier{schema, "idem_outbox_cdc_parked"}.Sanitize()
	var role, seq string
	var exists, ok bool
	err := conn.QueryRow(ctx, `SELECT current_user, COALESCE(pg_get_serial_sequence($1, 'id'), ''), to_regclass($2) IS NOT NULL,
		has_table_privilege($1, 'SELECT') AND has_table_privilege($1, 'INSERT') AND has_table_privilege($1, 'UPDATE')
		AND COALESCE(has_sequence_privilege(pg_get_serial_sequence($1, 'id'), 'USAGE'), true)
		AND (to_regclass($2) IS NULL OR has_table_privilege($2, 'INSERT'))`, full, parked).Scan(&role, &seq, &exists, &ok)
	if err != nil {
		return err
	}
	switch {
	case !exists:
		return &SetupError{Check: "outbox", Got: fmt.Sprintf("the outbox's schema is behind: %s is missing", parked),
			Fix: "run idem migrate up (or outbox.New) on the outbox's database: the relay parks what it cannot publish there"}
	case !ok:
		quoted := pgx.Identifier{role}.Sanitize()
		return &SetupError{Check: "privileges", Got: fmt.Sprintf("role %s may not park messages in %s", role, full),
			Fix: fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON %s TO %s; GRANT INSERT ON %s TO %s; GRANT USAGE ON SEQUENCE %s TO %s "+
				"(the relay parks there what it cannot publish, for an operator)", full, quoted, parked, quoted, seq, quoted)}
	}
	return nil
}

// emitterRoles lists the roles that may execute a pg_logical_emit_message (every
// overload: bytea and text content, and PostgreSQL 17's flush flag) but may not
// insert into the outbox $1. Superusers may do both; a role's memberships count.
const emitterRoles = `SELECT r.rolname FROM pg_roles r
	WHERE EXISTS (SELECT 1 FROM pg_proc p WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace
		AND has_function_privilege(r.oid, p.oid, 'EXECUTE'))
	AND NOT has_table_privilege(r.oid, $1::regclass, 'INSERT')
	ORDER BY r.rolname LIMIT 6`

// checkEmitters refuses WAL messages while a role without INSERT on the outbox may
// write one.
func (r *Relay) checkEmitters(ctx context.Context, conn *pgx.Conn, full string) error {
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return err
	}
	if version < 140000 {
		return &SetupError{Check: "messages", Got: fmt.Sprintf("PostgreSQL %d.%d does not send WAL messages to pgoutput", version/10000, version%10000/100),
			Fix: "upgrade to PostgreSQL 14 or later, or run without Config.Messages / --cdc-messages and write messages with outbox.EnqueueTx"}
	}
	rows, err := conn.Query(ctx, emitterRoles, full)
	if err != nil {
		return err
	}
	roles, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(roles) == 0 {
		return nil
	}
	// PUBLIC's grant is read after the roles: a GRANT ... TO PUBLIC between the two
	// statements (each reads the catalogs afresh) then lists every role above and is
	// reported as what it is. Read before them, the roles it let in were reported one
	// by one, with a REVOKE that would not have closed the door.
	var public bool
	var signatures string
	if err := conn.QueryRow(ctx, `SELECT COALESCE(bool_or(has_function_privilege('public', p.oid, 'EXECUTE')), false),
		COALESCE(string_agg(p.oid::regprocedure::text, ', ' ORDER BY p.oid), '')
		FROM pg_proc p WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace`).Scan(&public, &signatures); err != nil {
		return err
	}
	got := "roles " + strings.Join(roles[:min(len(roles), 5)], ", ")
	if len(roles) > 5 {
		got += " and more"
	}
	got += fmt.Sprintf(" may write WAL messages (EXECUTE on pg_logical_emit_message) without INSERT on %s", full)
	from := make([]string, len(roles))
	for i, r := range roles {
		from[i] = pgx.Identifier{r}.Sanitize()
	}
	if public {
		got = fmt.Sprintf("every role may write WAL messages: EXECUTE on pg_logical_emit_message is granted to PUBLIC (PostgreSQL's default), INSERT on %s is not", full)
		from = []string{"PUBLIC"}
	}
	return &SetupError{Check: "messages", Got: got + ": any of them could have the relay publish a message of its making",
		Fix: fmt.Sprintf("as a superuser, in this database: REVOKE EXECUTE ON FUNCTION %s FROM %s; GRANT EXECUTE on them only to roles "+
			"with INSERT on %s (the services that write the outbox); or run without Config.Messages / --cdc-messages",
			signatures, strings.Join(from, ", "), full)}
}
