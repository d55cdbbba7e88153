package idemsql

// InboxSQL is the inbox family of a Driver: every statement its component runs,
// with the arguments each takes and the columns each returns.
type InboxSQL struct {
}
