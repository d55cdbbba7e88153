package idemsql

// SagaSQL is the saga family of a Driver: every statement package effect/saga
// runs on idem_sagas and idem_saga_resolutions (and on idem_effects, for a saga's
// steps), with the arguments each takes, in order, and the columns each returns.
// Times are Unix nanoseconds; a parked saga's next_at is the largest int64.
type SagaSQL struct {
	// Insert creates a saga: id, saga, data, now, lease_until, token. The row is
	// 'running' at step 0 with results '{}', attempts 0, reason '', next_at,
	// created_at and updated_at now. It does nothing, without an error, if the id
	// exists: it affects 1 row or 0.
	Insert string
	// Poll returns the statement that finds due sagas of the names an orchestrator
	// has: now, then the names (n of them, none when n is 0). Column: id of up to
	// limit 'running' or 'compensating' sagas whose next_at and lease_until are at
	// or before now, the earliest next_at first.
	Poll func(names, limit int) string
	// Lease returns the statement that leases one due saga of those names:
	// lease_until, id, now, then the names. It adds 1 to the token and affects the
	// row only while it is due as Poll finds it.
	Lease func(names int) string
	// Read reads one saga: id. Columns: saga, state, step, data, results, attempts,
	// reason, token, next_at, lease_until, created_at, updated_at.
	Read string
	// ReadForUpdate is Read under a row lock held to the end of the transaction
	// (SQLite's writer transaction holds the whole database).
	ReadForUpdate string
	// Save writes an advance: state, step, results, attempts, reason, next_at,
	// lease_until, now, id, token. It affects the row only under token.
	Save string
	// GroupSave is Save over arrays, for the saves of concurrent sagas: states,
	// steps, results, attempts, reasons, next_ats, lease_untils, nows, ids,
	// tokens (one element per saga). It writes each row only under its token, as
	// Save does. Columns: id and token of each row it wrote. "" where the database
	// has no arrays: each save is then a statement of its own.
	GroupSave string
	// Park sets a saga aside: next_at (the parked mark), reason, now, id, token. It
	// clears lease_until and affects the row only under token.
	Park string
	// IDs lists sagas oldest first: a state ("" for every state), limit. Column:
	// id, in (created_at, id) order.
	IDs string
	// ParkedIDs lists the parked sagas oldest first: the parked mark, limit.
	// Column: id of 'running' or 'compensating' sagas whose next_at is the mark, in
	// (created_at, id) order.
	ParkedIDs string
	// List returns the statement of one page of Admin.List. Its arguments are, in
	// this order: the state (state), or the parked mark (parked: the parked
	// sagas); the previous page's last id (after); last the limit. Columns: id,
	// saga, state, step, attempts, reason, created_at, updated_at, next_at, in id
	// order.
	List func(state, parked, after bool) string
	// ReadResolution reads a resolution: id. Columns: note, resolved_at,
	// previous_state.
	ReadResolution string
	// InsertResolution records a resolution: id, previous_state, note, resolved_at.
	InsertResolution string
	// Retry makes an operator's retry: state, next_at, reason, now, id, state
	// before, token. It sets attempts 0, lease_until 0, adds 1 to the token and
	// affects the row only while it is in the state before under token.
	Retry string
	// Resolve closes a saga by hand: state, now, id, state before, token, as Retry
	// does without touching attempts, next_at and reason.
	Resolve string
	// RetryUndo makes a failed saga's failed compensation pending again: now, id.
	// In idem_effects it sets, for key id's 'failed' steps that start with "undo:",
	// state 'pending', token + 1, lease_until 0, reason '' and updated_at now.
	RetryUndo string
	// SweepIDs locks up to limit finished sagas last changed before a cutoff:
	// cutoff, limit. Column: id of 'completed', 'compensated' or 'resolved' sagas,
	// locked as ReadForUpdate locks, skipping locked rows where the database can.
	SweepIDs string
	// SweepEffects returns the statement that deletes the step effects of n
	// sagas: their ids. It deletes idem_effects rows of those keys whose step starts
	// with "do:" or "undo:".
	SweepEffects func(n int) string
	// SweepResolutions returns the statement that deletes the resolutions of n
	// sagas: their ids.
	SweepResolutions func(n int) string
	// SweepSagas returns the statement that deletes n sagas: their ids.
	SweepSagas func(n int) string
}
