// Package idemkey gives producers the right idempotency key for their case, and
// consumers the checks every package of idem shares: validation, scoping, and the age
// of time-based keys.
//
// A consumer deduplicates by remembering keys, so the strategy a producer picks
// decides what the consumer must store, for how long, and what it can refuse.
//
// # Strategies
//
//   - Random keys (NewV4). Nothing to coordinate and nothing revealed, but the key
//     carries no time: the consumer must remember every key for its whole retention
//     window and cannot tell a late retry from a new request. Storage grows with
//     window × rate and nothing bounds how late a retry may come.
//   - Time-based keys (NewV7, NewULID). The key carries its creation time, so the
//     consumer rejects anything older than its window (Stale, CheckFresh) instead of
//     running it again after its record was forgotten. Storage is still window × rate,
//     but now it is a bound: nothing older can slip through. Keys sort by time, which
//     keeps indexes on them append-only. The default for new producers.
//   - Per-producer sequences (package idemseq). A producer numbers its messages; the
//     consumer keeps a high watermark and a small window per producer: O(1) state per
//     producer instead of one record per key, at the cost of producer identity and
//     epochs.
//   - Intent keys (Intent). A UUIDv5 hashed from what identifies the logical intent
//     (cart id and the client's timestamp of the click, say), so producers that never
//     coordinate — two tabs, a retried batch job — agree on one key. Storage is like a
//     random key's. See the trap below.
//   - Derived keys (Derive). One key per step taken under a parent key, deterministic,
//     so a consumer that calls an external API after a crash sends the same
//     Idempotency-Key again, and each saga step has its own.
//
// # The intent trap
//
// An intent key is only as good as its fields. Hash the intent, not just the payload:
// two legitimately distinct orders with identical contents would collapse into one,
// and the second customer's order would be dropped as a duplicate (a false positive).
// The opposite trap is a field that changes between retries of one intent, such as
// the time of sending or an attempt counter: each retry then gets a new key and runs
// again (a false negative).
//
// # Freshness and clocks
//
// Time-based keys are judged against the consumer's clock. A key up to MaxSkew ahead
// is accepted; one further ahead is refused with ErrFuture, because it would stay
// fresh for longer than its record is kept. A consumer that refuses stale keys keeps
// each record for at least window + MaxSkew.
//
// # Validation and scope
//
// Validate applies the rules of idem.Key to a key; ValidateHeader the stricter rules of
// the HTTP Idempotency-Key header (printable ASCII). Scope builds an unambiguous
// idem.Key.Scope such as "tenant:operation" from parts that may contain ':'.
package idemkey
