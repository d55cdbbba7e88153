package idemsql

// OutboxSQL is the outbox family of a Driver: every statement its component runs,
// with the arguments each takes and the columns each returns.
type OutboxSQL struct {
}
