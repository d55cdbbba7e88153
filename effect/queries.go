package effect

import (
	"strings"

	"github.com/idemhq/idem/idemsql"
)

// queries are the fence's statements in one dialect. They name the column key as
// {{key}}: MySQL reserves the word and needs it quoted, in backquotes no other
// dialect reads.
type queries struct {
	insert, lock, takeover, renew, finish, release, pushBack, due, get string
}

// effectColumns are what Get and Admin.List read of an effect, in scanEffect's
// order (Get adds the result).
const effectColumns = `{{key}}, step, state, token, attempts, reason, lease_until, created_at, updated_at`

func newQueries(d idemsql.Dialect) queries {
	key, insert, lock := "key", "INSERT INTO", ""
	conflict := " ON CONFLICT (key, step) DO NOTHING"
	switch d {
	case idemsql.Postgres:
		lock = " FOR UPDATE"
	case idemsql.MySQL:
		// IGNORE skips only the duplicate here: the key and the step fit their
		// columns (validate bounds them).
		key, insert, lock, conflict = "`key`", "INSERT IGNORE INTO", " FOR UPDATE", ""
	}
	r := strings.NewReplacer("{{key}}", key)
	return queries{
		insert: r.Replace(insert + ` idem_effects ({{key}}, step, state, token, lease_until, attempts, created_at, updated_at)
			VALUES ($1, $2, 'pending', 1, $3, 1, $4, $4)` + conflict),
		lock: r.Replace(`SELECT state, token, lease_until, result, reason FROM idem_effects WHERE {{key}} = $1 AND step = $2` + lock),
		takeover: r.Replace(`UPDATE idem_effects SET token = $1, lease_until = $2, attempts = attempts + 1, updated_at = $3
			WHERE {{key}} = $4 AND step = $5`),
		renew: r.Replace(`UPDATE idem_effects SET lease_until = $1, updated_at = $2
			WHERE {{key}} = $3 AND step = $4 AND token = $5 AND state = 'pending'`),
		finish: r.Replace(`UPDATE idem_effects SET state = $1, result = $2, reason = $3, updated_at = $4
			WHERE {{key}} = $5 AND step = $6 AND token = $7 AND state = 'pending'`),
		release: r.Replace(`UPDATE idem_effects SET lease_until = 0, updated_at = $1
			WHERE {{key}} = $2 AND step = $3 AND token = $4 AND state = 'pending'`),
		pushBack: r.Replace(`UPDATE idem_effects SET lease_until = $1
			WHERE {{key}} = $2 AND step = $3 AND state = 'pending' AND lease_until <= $1`),
		due: r.Replace(`SELECT {{key}} FROM idem_effects WHERE step = $1 AND state = 'pending' AND lease_until <= $2
			ORDER BY lease_until LIMIT $3`),
		get: r.Replace(`SELECT ` + effectColumns + `, result FROM idem_effects WHERE {{key}} = $1 AND step = $2`),
	}
}
