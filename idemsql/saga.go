package idemsql

// SagaSQL is the saga family of a Driver: every statement its component runs,
// with the arguments each takes and the columns each returns.
type SagaSQL struct {
}
