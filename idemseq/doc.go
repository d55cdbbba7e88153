// Package idemseq remembers which sequence numbers each producer has sent, in O(1)
// state per producer, and hands out ids in blocks.
//
// A producer that numbers its messages 1, 2, 3 … lets a consumer replace a set of
// remembered keys (one row or map entry per message, for the whole retention window)
// with a high watermark and a sliding bitmap: the highest number accepted, and one bit
// for each of the Window numbers below it. The verdicts are exact:
//
//   - a number above the watermark is Accepted and moves the window;
//   - a number inside the window is Accepted once and a Duplicate afterwards, so
//     sequence 100 arriving after 101 is still applied;
//   - a number below the window is TooOld: the tracker can no longer tell, so it says
//     so instead of silently accepting (raise Window, or have the producer resend
//     sooner);
//   - a message from an older producer epoch is Fenced.
//
// With the default window of 1,024 numbers a producer's state is 128 bytes of bitmap
// plus two counters, whatever its rate; see BENCHMARKS.md for the side-by-side cost of a
// UUID set for the same traffic.
//
// # Epochs
//
// A producer that (re)starts calls Register and gets a higher epoch and the number to
// continue from, so it continues its sequence instead of resetting it. Messages carrying
// an older epoch come from a zombie (a paused or partitioned previous incarnation) and
// are Fenced, the problem Kafka's transactional.id solves. A message carrying a newer
// epoch than the tracker knows is accepted and the tracker adopts that epoch, so
// registration through another tracker of the same producer is honoured.
//
// # Where the state lives
//
// Memory keeps it in the process. SQLTracker keeps it in a table of SQLite,
// PostgreSQL or MySQL/MariaDB, and its CheckTx runs in the caller's transaction: the number is recorded
// if and only if the effect commits, so a crash cannot split them. idempg.NewSeqTracker
// gives the same tracker for pgx transactions, and idemredis.SeqTracker keeps the state
// in Redis, updated atomically by a script.
//
// # Hi/Lo
//
// HiLo allocates ids without a round trip per id: it reserves a block from a Postgres
// sequence (idempg.HiLoSequence) or a row of a SQLite or MySQL/MariaDB table
// (idemsqlite.HiLoTable, idemmysql.HiLoTable, both on TableSource) and hands the
// block out in memory.
package idemseq
