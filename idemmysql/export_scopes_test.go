package idemmysql

// ScopesQuery is the statement of s's Scopes, for EXPLAIN.
func ScopesQuery(s *Store) string { return s.scopesSQL() }
