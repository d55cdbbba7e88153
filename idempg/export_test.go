package idempg

import "time"

// SetNotifierCheck shortens how long n waits on a silent connection before it
// checks the connection, so a test sees several checks.
func SetNotifierCheck(n *Notifier, d time.Duration) { n.check = d }
