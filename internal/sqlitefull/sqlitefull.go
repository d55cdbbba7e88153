// Package sqlitefull recognizes SQLite's full disk (SQLITE_FULL) and says what it
// means. It holds the sentinel idemsqlite exports as ErrDiskFull, so that packages
// that cannot import idemsqlite (idemsql, whose SQLite TxDB reports a caller's
// transaction failing for want of space) return errors that match it. It does not
// import the driver: modernc.org/sqlite's errors are told by their Code() int.
package sqlitefull

import (
	"errors"
	"fmt"
)

// ErrDiskFull is idemsqlite.ErrDiskFull.
var ErrDiskFull = errors.New("disk is full")

// code is SQLITE_FULL, https://sqlite.org/rescode.html#full.
const code = 13

// Is reports whether err is SQLite's SQLITE_FULL (any extended code), or already
// matches ErrDiskFull.
func Is(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrDiskFull) {
		return true
	}
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == code
}

// TxError is a transaction that failed on a full disk.
type TxError struct{ Err error }

func (e *TxError) Error() string {
	return fmt.Sprintf("disk is full: free space on the volume of the database, nothing of this transaction was stored (%v)", e.Err)
}

func (e *TxError) Unwrap() []error { return []error{ErrDiskFull, e.Err} }

// Tx returns err as a *TxError when it is SQLite's SQLITE_FULL and not yet
// explained, and as it is otherwise.
func Tx(err error) error {
	if !Is(err) || errors.Is(err, ErrDiskFull) {
		return err
	}
	return &TxError{Err: err}
}
