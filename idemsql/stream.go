package idemsql

// StreamSQL is the stream family of a Driver: the statements of package stream's
// SQLStore, on the tables of the migration set "stream": idem_stream_heads (each
// channel's last seq), idem_stream_events (channel, seq, type, entity, data, ikey:
// the idempotency key or empty, at: Unix nanoseconds) and idem_stream_clients (each
// client's acknowledged seq, and when it was last seen, in Unix nanoseconds).
//
// Every read of events returns the columns seq, type, entity, data, at.
type StreamSQL struct {
	// OneWriter says the database runs one write transaction at a time (SQLite):
	// the store then runs one append transaction at a time, which the appends
	// waiting share, instead of several that would queue on the lock.
	OneWriter bool
	// MaxKey, where not 0, is the longest channel and client id, in bytes, the
	// database keeps as a key (MySQL's VARBINARY(255)): Ack refuses a longer one
	// rather than let the database refuse or truncate it.
	MaxKey int

	// EventByKey reads the event of channel $1 whose idempotency key is $2 (never
	// empty), through the unique index on (channel, key), without reading the rest of
	// the channel.
	EventByKey string
	// NextHead advances the head of channel $1 (1 for a new channel) and holds its
	// row locked until the transaction ends, so that seqs are given in commit
	// order. Unless NextHeadRead is set, it returns the new head.
	NextHead string
	// NextHeadRead, where set, returns the head NextHead moved to, in the same
	// transaction, NextHead then returning no row (MySQL has no RETURNING: its
	// NextHead keeps the head in LAST_INSERT_ID).
	NextHeadRead string
	// InsertEvent writes event seq $2 of channel $1: type $3, entity $4, data $5
	// (NULL for none), ikey $6 (empty for none), at $7. A second event of one channel
	// and non-empty key must fail on the unique index.
	InsertEvent string
	// ReadEvents reads up to $3 events of channel $1 above seq $2, in seq order.
	ReadEvents string
	// Head reads the head of channel $1 (no row for a channel never appended to).
	Head string
	// Ack records that client $2 of channel $1 acknowledged seq $3 and was seen
	// at $4: seen is set, and seq moves only up (an ack below the last one only
	// marks the client as seen).
	Ack string

	// The four statements of a Trim, in this order, in one READ COMMITTED
	// transaction where the database has one.

	// ForgetIdleClients deletes the clients seen before $1.
	ForgetIdleClients string
	// ForgetExtraClients deletes all but the $1 most recently seen clients of
	// each channel (ties broken by client id).
	ForgetExtraClients string
	// TrimOld deletes the events appended before $1; it returns how many.
	TrimOld string
	// TrimAcked deletes the events at or below the lowest seq acknowledged by the
	// clients of their channel (none of a channel without clients); it returns
	// how many.
	TrimAcked string
}
