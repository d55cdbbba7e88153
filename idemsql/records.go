package idemsql

// RecordsSQL is the records family of a Driver: every statement its component runs,
// with the arguments each takes and the columns each returns.
type RecordsSQL struct {
}
