package idemsql

// SeqSQL is the seq family of a Driver: the statements of idemseq's SQLTracker on
// the table idem_sequences (migrate.Sequences), one row per (scope, producer) with
// the producer's window: epoch, next (the number after the highest accepted) and
// bits (the window's bitmap, NULL for an empty one).
//
// A check runs in the caller's transaction and must leave the producer's row
// locked until that transaction ends, so that concurrent checks of one producer
// decide one after the other. How it takes the lock is the database's choice:
//
//   - Ensure (if set), then Lock, which must then find the row;
//   - or Lock alone; when it finds no row, Insert writes the first window and a
//     lost race to insert it is settled by running Lock again.
//
// The Hi/Lo block sources are not here: each is the driver's own code
// (idempg.HiLoSequence, idemsqlite.HiLoTable, idemmysql.HiLoTable).
type SeqSQL struct {
	// Ensure, where set, runs first in a check: it inserts a blank window (epoch 0,
	// next 0, bits NULL) for scope $1 and producer $2 unless the row exists, and
	// takes the row's exclusive lock either way; it returns no rows. A database
	// whose locking read of a missing row locks a gap (InnoDB) needs it: first
	// checks of a new producer would deadlock with each other on the gap.
	Ensure string
	// Lock returns the window of scope $1 and producer $2 (epoch, next, bits) and
	// locks the row until the transaction ends (SELECT … FOR UPDATE). It may create
	// the row as Ensure does (an upsert with RETURNING), where that costs no more
	// than a read; without Ensure, no row means Insert follows.
	Lock string
	// Insert writes the first window of a producer: scope $1, producer $2, epoch
	// $3, next $4, bits $5, and does nothing if the row exists (a concurrent first
	// check won). It affects 1 row, or 0 when it did nothing.
	Insert string
	// Update stores the window of scope $1 and producer $2: epoch $3, next $4,
	// bits $5.
	Update string
	// Register raises the epoch of scope $1 and producer $2 by one, creating the
	// row at epoch 1, next 0 and bits NULL if missing. It returns the row's epoch
	// and next afterwards, unless Registered is set: then it returns no rows and
	// keeps the row locked until the transaction ends.
	Register string
	// Registered, where set, reads the epoch and next of scope $1 and producer $2
	// after Register, in Register's transaction: for a database with no
	// UPDATE … RETURNING.
	Registered string
}
