package idem

import (
	"context"
	"errors"
)

// ErrNotFound is returned by Inspector.Inspect and Evict for a key that has no
// record. It is also the one name of "no such item" across idem: every package's
// not-found error (outbox.ErrNotParked, inbox.ErrNoDeadLetter, saga.ErrNotFound)
// matches it with errors.Is, so a caller checks one sentinel.
var ErrNotFound = errors.New("idem: no record for this key")

// NotFoundError is a package's own "no such item" error, with its own message,
// which errors.Is reports as ErrNotFound.
type NotFoundError struct{ Msg string }

func (e *NotFoundError) Error() string { return e.Msg }

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// Inspector is implemented by stores whose records an operator can look at and act
// on: the admin API's and `idem keys`' view of a store. Every store of this module
// implements it and passes idemtest.InspectorSuite.
//
// Unlike a claim's Result, the Records it returns carry the holder's Token: an
// operator who can read them may fence the holder out (Evict), so the admin API
// guards them behind its token.
type Inspector interface {
	// Inspect returns k's record as stored, including one whose lease or retention
	// has passed but which no sweep has removed yet (ExpiresAt says so). A key with
	// no record gets ErrNotFound.
	Inspect(ctx context.Context, k Key) (Record, error)
	// List returns up to limit records of scope in ascending id order, starting after
	// cursor ("" for the first page), and the cursor of the next page, "" after the
	// last. A cursor is opaque: pass back what a previous page returned. Each page
	// costs an index range scan, never a scan of the whole store (Redis: SCAN with
	// its cursor, whose pages may be shorter than limit and are not ordered).
	List(ctx context.Context, scope, cursor string, limit int) (KeyPage, error)
	// Evict deletes k's record so the key is claimable again, and returns the record
	// it deleted. A completed record goes freely; an in-progress one only with force
	// (otherwise *InputError on field "force"), and its holder is fenced out: its
	// Complete and Renew get ErrLeaseLost, and the next claim of the key gets a larger
	// token, after which the old holder's Release gets ErrLeaseLost too (before it,
	// the key has no record, and releasing such a key is Store's usual no-op). A key
	// with no record gets ErrNotFound.
	Evict(ctx context.Context, k Key, force bool) (Record, error)
}

// KeyPage is one page of Inspector.List.
type KeyPage struct {
	Records []Record
	// Next is the cursor of the following page, "" when there is none.
	Next string
}

// MaxListLimit bounds Inspector.List's limit; a larger or non-positive limit is an
// *InputError.
const MaxListLimit = 1000

// ScopeLister is implemented by stores that can list the scopes they hold records
// in: the operator's way in when scopes are not known in advance (behind `idem
// serve` they are hashes of credentials). It is optional: find it by type assertion
// on a Store or Inspector. Every SQL store, the memory store (with
// idemmem.Config.KeepKeys) and Redis implement it and pass idemtest.InspectorSuite's
// Scopes subtest.
type ScopeLister interface {
	// Scopes returns up to limit scopes that hold at least one record, starting
	// after cursor ("" for the first page), and the cursor of the next page, ""
	// after the last. Scopes come in ascending order (byte order, or on PostgreSQL
	// the scope column's collation), each once, and each page costs bounded work
	// on SQL stores: up to limit+1 seeks of the primary key (scope, id), never a
	// scan of the records. Redis walks its keyspace with SCAN instead: pages are
	// not ordered, may be shorter than limit (even empty before the last) and may
	// repeat a scope of an earlier page, though a scope present throughout the walk
	// is never missed. A record's count per scope is not given: on a large SQL
	// table it would cost a scan of the scope's records.
	Scopes(ctx context.Context, cursor string, limit int) (ScopePage, error)
}

// ScopePage is one page of ScopeLister.Scopes.
type ScopePage struct {
	Scopes []string
	// Next is the cursor of the following page, "" when there is none.
	Next string
}
