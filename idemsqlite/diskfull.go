package idemsqlite

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/idemhq/idem/internal/sqlitefull"
)

// ErrDiskFull is matched (errors.Is) by the error of a call that failed because the
// volume of the database file is full (SQLITE_FULL): nothing of that call was
// stored, the store keeps running, and the same call succeeds once there is room.
// The SQLite TxDB (TxDB, idemsql.SQLDB) returns it too, for a transaction of the
// caller's (outbox.EnqueueTx's, the inbox's batch, a queue producer's) that the
// disk refused at Begin, a statement or Commit: nothing of that transaction was
// stored.
var ErrDiskFull = sqlitefull.ErrDiskFull

// diskFullError says which file could not grow and what to do about it.
type diskFullError struct {
	path string // the database file; "" when SQLite did not say
	err  error  // the driver's error
}

func (e *diskFullError) Error() string {
	where := "the database's volume"
	if e.path != "" {
		where = "the volume of " + filepath.Dir(e.path)
	}
	return fmt.Sprintf("disk is full (%v): nothing of this call was stored; free space on %s, then retry (the store recovers without a restart)", e.err, where)
}

func (e *diskFullError) Unwrap() []error { return []error{ErrDiskFull, e.err} }

// explain names the fix when err is SQLite reporting a full disk, and returns any
// other error as it is.
func explain(err error, path string) error {
	if !sqlitefull.Is(err) || errors.Is(err, ErrDiskFull) { // not full, or explained already
		return err
	}
	return &diskFullError{path: path, err: err}
}
