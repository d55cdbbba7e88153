package idemsql

import (
	"strings"
	"time"

	"github.com/idemhq/idem"
)

// RecordsSQL is the records family of a Driver: the statements on a SQL store's
// records table that are the same logic on every database (package
// idemsql/sqlstore runs them: the operator's view of the records, the list of
// scopes, the sweeper and the records gauge), with the arguments each takes and the
// columns each returns. A store's claim path (Claim, Complete, Release, Renew,
// RecordTx) is each driver's own tuned code and is not part of the family.
//
// {{table}} in a statement stands for the records table's name as configured (a
// lowercase identifier, checked by package migrate, so it needs no escaping: quote
// it as the database quotes identifiers); ForTable fills it in. The "record
// columns" a statement returns are, in this order: state (1 in progress, 2
// completed), fingerprint (bytes), token (integer), result (bytes, NULL while in
// progress), created, expires (times, see TimeUnit). Every statement takes $1
// placeholders.
type RecordsSQL struct {
	// TimeUnit is how the created and expires columns read: zero where the driver
	// scans them into time.Time (a timestamp column), otherwise the unit of the
	// integers they hold since the Unix epoch (time.Nanosecond on SQLite,
	// time.Microsecond on MySQL).
	TimeUnit time.Duration

	// Inspect reads one record, whatever its lease or retention says.
	// Arguments: $1 scope, $2 id. Returns the record columns; no row when there is
	// no record.
	Inspect string
	// List reads a page of one scope's records in ascending id order, as one range
	// of the primary key (scope, id): never a scan of the scope.
	// Arguments: $1 scope, $2 the id the page starts after ("" for the first page),
	// $3 the number of rows. Returns id, then the record columns.
	List string
	// Scopes reads a page of the distinct scopes, in ascending order, each step a
	// seek of the primary key to the next scope: never a read of a scope's records.
	// Arguments: $1 the scope the page starts after ("" for the first page), $2 the
	// number of rows. Returns scope.
	Scopes string

	// EvictLocked is true where a DELETE cannot return the rows it deleted (MySQL):
	// Evict then reads the record with Lock and deletes it with Delete in one
	// transaction (again after a serialization failure), and leaves Evict and State
	// unused. Where it is false, Evict runs Evict and, when that deleted nothing,
	// State, and never opens a transaction.
	EvictLocked bool
	// Evict deletes a record in one statement: a completed one always, an
	// in-progress one only when $3 is true. A concurrent Complete then lands either
	// before it (the completed record is evicted) or after it (no row: the holder's
	// Complete fails). Arguments: $1 scope, $2 id, $3 force (bool). Returns the
	// record columns of the deleted row; no row when nothing was deleted.
	Evict string
	// State reads a record's state, after an Evict that deleted nothing: no row (no
	// record), or an in-progress record that needs force.
	// Arguments: $1 scope, $2 id. Returns state.
	State string
	// Lock reads a record as Inspect does, holding its row lock to the end of the
	// transaction. Used only where EvictLocked is true.
	// Arguments: $1 scope, $2 id. Returns the record columns.
	Lock string
	// Delete deletes a record, in the transaction of Lock. Used only where
	// EvictLocked is true. Arguments: $1 scope, $2 id.
	Delete string

	// Sweep deletes up to $1 records whose lease or retention has passed by the
	// database's clock, and reports them as rows affected; the sweeper runs it
	// until it deletes fewer. Empty where the store sweeps through a path of its
	// own (SQLite, whose single writer sweeps by the store's clock).
	// Arguments: $1 the number of rows.
	Sweep string
	// Count estimates the number of records, for the idem_records gauge: cheap
	// enough to run at every scrape (a planner's estimate where counting would
	// scan). No arguments. Returns one number (NULL where there is no estimate).
	Count string

	// InsertFull writes a record with every column given, for tests and tools that
	// need records in a chosen state (drivertest seeds the table with it): river's
	// JobInsertFull. No store calls it.
	// Arguments: $1 scope, $2 id, $3 state, $4 fingerprint, $5 token, $6 result
	// (or NULL), $7 retention, $8 created, $9 expires (all three in microseconds,
	// the times since the Unix epoch).
	InsertFull string

	// Applied returns the statement the audit (package audit) reads which of n
	// keys of one scope have a record with: $1 scope, $2..$n+1 ids. Returns id,
	// state, created (a time, see TimeUnit), one row per id that has a record:
	// n lookups of the primary key.
	Applied func(n int) string
}

// ForTable returns a copy of r with {{table}} filled in as table: a store's
// statements, built once at construction.
func (r *RecordsSQL) ForTable(table string) RecordsSQL {
	out := *r
	for _, s := range []*string{&out.Inspect, &out.List, &out.Scopes, &out.Evict, &out.State,
		&out.Lock, &out.Delete, &out.Sweep, &out.Count, &out.InsertFull} {
		*s = strings.ReplaceAll(*s, "{{table}}", table)
	}
	if r.Applied != nil {
		out.Applied = func(n int) string { return strings.ReplaceAll(r.Applied(n), "{{table}}", table) }
	}
	return out
}

// ScanRecord reads the record columns of row, after the columns pre, as the record
// of key k: times as TimeUnit says, an empty fingerprint as nil, and a completed
// record's NULL result as empty (a completed record always has a result).
func (r *RecordsSQL) ScanRecord(row Row, k idem.Key, pre ...any) (idem.Record, error) {
	var (
		state, token     int64
		created, expires int64
		rec              = idem.Record{Key: k}
		dest             = append(pre, &state, &rec.Fingerprint, &token, &rec.Result)
	)
	if r.TimeUnit == 0 {
		dest = append(dest, &rec.CreatedAt, &rec.ExpiresAt)
	} else {
		dest = append(dest, &created, &expires)
	}
	err := row.Scan(dest...)
	if r.TimeUnit != 0 {
		rec.CreatedAt, rec.ExpiresAt = fromUnit(created, r.TimeUnit), fromUnit(expires, r.TimeUnit)
	}
	rec.State, rec.Token = idem.State(state), uint64(token)
	if len(rec.Fingerprint) == 0 {
		rec.Fingerprint = nil
	}
	if rec.State == idem.StateCompleted && rec.Result == nil {
		rec.Result = []byte{}
	}
	return rec, err
}

// fromUnit is the time n units after the Unix epoch.
func fromUnit(n int64, unit time.Duration) time.Time {
	if unit == time.Microsecond {
		return time.UnixMicro(n)
	}
	return time.Unix(0, n*int64(unit))
}
