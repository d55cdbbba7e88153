package idemsql

// StreamSQL is the stream family of a Driver: every statement its component runs,
// with the arguments each takes and the columns each returns.
type StreamSQL struct {
}
