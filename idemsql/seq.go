package idemsql

// SeqSQL is the seq family of a Driver: every statement its component runs,
// with the arguments each takes and the columns each returns.
type SeqSQL struct {
}
