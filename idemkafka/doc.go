// Package idemkafka is the Kafka adapter of idem: a Sink on franz-go's idempotent
// producer and a Source that is a member of a consumer group and commits offsets
// only after the effects of the records are acknowledged (or leaves the offsets to
// the database that holds the effects). It passes idemtest.BrokerSuite and is
// tested against franz-go's in-process cluster, kfake.
//
// # Publishing
//
// Sink produces with acks=all and the idempotent producer (franz-go's default, which
// NewSink refuses to have disabled). Message.Topic is the record's topic,
// Message.OrderingKey its key, so one key stays on one partition and in order;
// Message.ID travels in the idem.HeaderID ("Idem-Msg-Id") header and
// Message.Headers as record headers. Publish waits for every record's result.
//
// The idempotent producer only removes the duplicates of its own retries within one
// producer session. A message published again (an outbox relay that crashed after
// publishing) is a second record with the same ID: the consumer's inbox drops it.
//
// # Consuming and committing
//
// Source tracks, per partition, every record it returned from the first one not yet
// acknowledged. The offset it commits is that first unacknowledged record's, so a
// crash, a rebalance or Close redelivers exactly the records whose effects are not
// known to be done, and never skips one: an acknowledged record behind an
// unacknowledged one is redelivered too (the inbox recognises it by its ID).
// Acknowledged offsets are committed every SourceConfig.CommitInterval, when
// partitions are revoked, on Close, and when Source.Commit is called. Ack itself is
// local and returns at once: committing every Ack would cost a round trip per
// record, and a commit lost to a crash only redelivers records the inbox has seen.
//
// # Rebalances
//
// When partitions are revoked, the source commits their acknowledged prefix and
// drops them in one step under its lock. A later Ack or Nak of one of their
// deliveries returns ErrRevoked and has no effect: the record goes to the new owner
// from the committed offset. This is an error rather than a silent success so a
// caller can count it, but it is final and harmless, and the inbox need not retry.
//
// The source uses kgo.BlockRebalanceOnPoll, but only for the instant between a poll
// and the registration of its records: Receive calls AllowRebalance before it
// returns. Blocking rebalances until deliveries are settled (the option's usual
// use) would let one slow handler stall the whole group and, past the rebalance
// timeout, get the member kicked out. Without the option, a revocation could run
// between a poll returning records and the source recording them, and those records
// would be tracked for a partition the member no longer owns, so their Acks could
// commit over the new owner's progress. With it, records are always recorded before
// any revocation sees the partition, and the revocation drops them with the rest.
//
// # Nak
//
// Kafka cannot redeliver one record. Nak keeps the record in the source, which
// returns it again from Receive once the delay has passed; until it is acknowledged
// the partition's committed offset stays before it. So Nak's delay is honoured
// (Features.DelayedNak), but a Nak'd record comes back after records of its
// partition that were delivered meanwhile, and only to this source: if the
// partition is revoked first, its new owner receives it at once.
//
// # Features
//
//   - Dedup is false: Kafka does not drop a record republished with an ID it saw.
//   - OrderedPerKey is true: one key maps to one partition, which one member of the
//     group consumes in offset order (a Nak'd record aside, as above).
//   - DelayedNak is true: the adapter waits out the delay itself.
//   - Attempts is false: Kafka keeps no delivery count, and a count local to one
//     source would start over at every rebalance or restart, so Delivery.Attempt is
//     always 0 and the inbox counts attempts itself.
//
// # Offsets in the database
//
// For effects in a SQL database, the inbox can store a record's next offset (see
// Offset) in the same transaction as the effect, and SourceConfig.StoredOffsets
// returns those offsets when partitions are assigned. Consumption then resumes
// after the last committed effect, whatever the group's committed offset says.
// Acknowledge deliveries anyway: Ack is how the source forgets a record.
package idemkafka
