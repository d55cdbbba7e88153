// Package idem is the vocabulary of idem: keys, claims, outcomes, records and the
// Store contract that every dedup backend implements.
//
// Networks lose and duplicate messages, so delivery can only be at-least-once.
// Effects can still happen exactly once: a consumer records the message's key in the
// same ACID transaction as the effect, and a redelivery then finds the key and does
// nothing. idem provides that mechanism at each boundary of a flow; this package
// holds what they share.
//
// # Claims and outcomes
//
// A worker that is about to perform an effect first claims the effect's Key. The store
// answers with an Outcome, never with an error for a duplicate:
//
//   - Acquired: the key was free; the caller holds it with a fencing token and must
//     either Complete it (recording the result) or Release it (so a retry can run).
//   - Replayed: the key was completed before; the stored result comes back.
//   - InProgress: another holder has a live lease on the key.
//   - Mismatch: the key was used with another fingerprint (another intent).
//
// # Leases and fencing
//
// An in-progress claim holds a lease. If the holder crashes, the lease runs out and the
// next claimant takes the key over with a higher fencing token; the old holder's late
// Complete or Release then fails with ErrLeaseLost instead of overwriting the new
// holder's work. Tokens strictly increase per key, across takeovers and across
// incarnations of the key (released or expired, then claimed anew), so an earlier
// holder can never present a matching token. Each backend documents how it keeps them
// rising (a sequence, a per-shard floor, a tombstone that outlives the lease).
//
// A record whose lease (in progress) or retention (completed) has passed is treated as
// absent, except that its token is exceeded. Backends remove such records in the
// background: Redis by key expiry, the others through the Sweeper interface.
//
// # Transactions
//
// Recording the key and applying the effect must commit together. Stores backed by a
// SQL database implement TxStore for their transaction type (pgx.Tx, *sql.Tx): the
// claim, the business write and the completion share one transaction, so a crash
// leaves either all of them or none. With a Store alone (Redis, memory) the result of
// an effect is remembered and replayed, but an effect that ran and crashed before
// Complete will run again after the lease: that boundary is at-least-once, and the
// docs of every package say which kind it offers.
package idem
