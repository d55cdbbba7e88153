package idemmysql

import "github.com/idemhq/idem/idemsql"

// ScopesQuery is the statement of s's Scopes, for EXPLAIN.
func ScopesQuery(s *Store) string {
	q, _ := idemsql.Rebind(Driver().Records().ForTable(s.table).Scopes, []any{nil, nil})
	return q
}
