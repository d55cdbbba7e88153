package idemsql

// EffectSQL is the effect family of a Driver: every statement package effect runs
// on idem_effects (the fence, Recover, Admin and the Sweeper), with the arguments
// each takes, in order, and the columns each returns. Times are Unix nanoseconds.
type EffectSQL struct {
	// Insert records a new effect: key, step, lease_until, now. It writes the row
	// (key, step, 'pending', token 1, lease_until, attempts 1, created_at and
	// updated_at now) and does nothing, without an error, if (key, step) exists:
	// it affects 1 row or 0.
	Insert string
	// Record records a finished effect at once, with no PENDING before it (the
	// fence's keyed path, Fence.DoKeyed): key, step, state, result, reason, now. It
	// writes the row (key, step, state, token 1, lease_until 0, attempts 1, result,
	// reason, created_at and updated_at now) and does nothing, without an error, if
	// (key, step) exists: it affects 1 row or 0.
	Record string
	// LockFirst makes the fence's transaction read the row (Lock) before it
	// inserts, and insert only when there is none. MySQL needs it: its INSERT
	// IGNORE takes a shared lock on an existing row, which upgrading to Lock's
	// would deadlock waiting workers against the holder's Finish.
	LockFirst bool
	// Lock reads an effect under a row lock held to the end of the transaction:
	// key, step. Columns: state, token, lease_until, result, reason.
	Lock string
	// Takeover gives an effect to a new holder: token, lease_until, now, key, step.
	// It sets token, lease_until and updated_at and adds 1 to attempts.
	Takeover string
	// Renew extends a lease: lease_until, now, key, step, token. It affects the row
	// only while it is 'pending' under token.
	Renew string
	// Finish records the outcome: state, result, reason, now, key, step, token. It
	// affects the row only while it is 'pending' under token.
	Finish string
	// Release ends a lease after a failed call: now, key, step, token. It sets
	// lease_until to 0 while the row is 'pending' under token.
	Release string
	// PushBack sets a past lease to end now: now, key, step. It affects the row
	// only while it is 'pending' with lease_until at or before now.
	PushBack string
	// Due lists the keys of a step's effects past their lease: step, now, limit.
	// Column: key, of up to limit 'pending' rows with lease_until at or before now,
	// the earliest lease_until first.
	Due string
	// Get reads one effect: key, step. Columns: key, step, state, token, attempts,
	// reason, lease_until, created_at, updated_at, result.
	Get string
	// GroupInsert is Insert over arrays, for concurrent callers: keys, steps,
	// leases, nows (text[], text[], bigint[], bigint[]), written in (key, step)
	// order. Columns: key, step of each row it inserted. "" where the database
	// has no arrays: each caller then inserts alone.
	GroupInsert string
	// GroupFinish is Finish over arrays: keys, steps, tokens, states, results,
	// reasons, nows (text[], text[], bigint[], text[], bytea[], text[], bigint[]),
	// in (key, step) order. Columns: key, step, token of each row it updated. ""
	// where GroupInsert is.
	GroupFinish string
	// GroupRecord is Record over arrays, for concurrent DoKeyed callers: keys,
	// steps, states, results, reasons, nows (text[], text[], text[], bytea[],
	// text[], bigint[]), written in (key, step) order. Columns: key, step of each
	// row it inserted. "" where GroupInsert is.
	GroupRecord string
	// GroupLook reads many effects for concurrent DoKeyed callers: keys, steps
	// (text[], text[]). Columns: key, step, state, result, reason of each that
	// exists. "" where GroupInsert is.
	GroupLook string
	// List returns the statement of one page of Admin.List. Its arguments are, in
	// this order, those of the conditions asked for: the state (state: rows in that
	// state, never 'complete'), now (pastLease: lease_until at or before it), the key
	// (key), the key and step of the previous page's last row (after: rows after it
	// in (key, step) order); last the limit. Columns: key, step, state, token,
	// attempts, reason, lease_until, created_at, updated_at, in (key, step) order.
	List func(state, pastLease, key, after bool) string
	// Sweep deletes up to limit 'complete' effects last changed before a cutoff:
	// cutoff, limit. It affects the rows it deleted, and skips rows another
	// transaction holds locked where the database can.
	Sweep string
	// SweepKeepingSagas is Sweep keeping the effects whose key is the id of a saga
	// in idem_sagas that is 'running', 'compensating' or 'failed': what the sweep
	// runs once the sagas' table exists.
	SweepKeepingSagas string
}
