package idempg

// ScopesQuery returns the statement of s's Scopes, for EXPLAIN.
func ScopesQuery(s *Store) string { return Driver().Records().ForTable(s.table).Scopes }
