package pgcdc

import (
	"errors"
	"fmt"
)

// ErrSlotTaken is returned (wrapped in a *SetupError) when the slot is being read by
// a process that does not take the relay's lock, such as pg_recvlogical or a relay
// with another Config.Source on the same slot.
var ErrSlotTaken = errors.New("pgcdc: replication slot is read by another process")

// SetupError is a server setting or object the relay cannot work with. It is not
// retried: Run returns it, since waiting does not fix a configuration.
type SetupError struct {
	Check string // what was checked: "wal_level", "privileges", "publication", "slot"
	Got   string // what was found
	Fix   string // what to do
	Err   error  // a sentinel such as ErrSlotTaken, or the server's error
}

func (e *SetupError) Error() string {
	s := fmt.Sprintf("pgcdc: %s: %s", e.Check, e.Got)
	if e.Err != nil && !errors.Is(e.Err, ErrSlotTaken) {
		s += ": " + e.Err.Error()
	}
	return s + " (fix: " + e.Fix + ")"
}

func (e *SetupError) Unwrap() error { return e.Err }

// errPooler is the refusal of a URL that reaches PostgreSQL through a connection
// pooler such as PgBouncer.
var errPooler = &SetupError{Check: "pooler",
	Got: "the URL reaches PostgreSQL through a connection pooler (such as PgBouncer): the server process differs from the one the connection was given, " +
		"and a pooler carries neither the replication protocol nor the slot's session advisory lock",
	Fix: "connect the CDC relay to the server directly, not through the pooler (the outbox writers may stay behind it)"}
