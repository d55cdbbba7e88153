package idemkafka

// SetBeforeEnd installs fn to run after each batch's outputs are produced and
// before its transaction ends; fn returning false crashes the worker there: its
// client closes with the transaction open and Run returns ErrCrashed.
func SetBeforeEnd(t *Transform, fn func(worker int) bool) { t.beforeEnd = fn }

// ErrCrashed is what Run returns after SetBeforeEnd's fn crashed a worker.
var ErrCrashed = errCrashed
