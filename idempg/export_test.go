package idempg

import "time"

// SetNotifierCheck shortens how long n waits on a silent connection before it
// checks the connection, so a test sees several checks.
func SetNotifierCheck(n *Notifier, d time.Duration) { n.check = d }

// Offline returns cfg for a store on a server that is not there, for the tests of
// what its calls then return: the store skips even the schema check.
func Offline(cfg Config) Config {
	cfg.offline = true
	return cfg
}

// ListQuery returns the statement of s's List, for EXPLAIN.
func ListQuery(s *Store) string { return Driver().Records().ForTable(s.table).List }
