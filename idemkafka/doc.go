// Package idemkafka is the Kafka adapter of idem: a Sink on franz-go's idempotent
// producer and a Source that is a member of a consumer group and commits offsets
// only after the effects of the records are acknowledged (or leaves the offsets to
// the database that holds the effects). It passes idemtest.BrokerSuite and is
// tested against franz-go's in-process cluster, kfake. Transform is a
// read-process-write pipeline that commits its outputs and its offsets in one
// Kafka transaction, for consumers whose only effect is producing to Kafka.
//
// # Publishing
//
// Sink produces with acks=all and the idempotent producer (franz-go's default, which
// NewSink refuses to have disabled). Message.Topic is the record's topic,
// Message.OrderingKey its key, so one key stays on one partition and in order;
// Message.ID travels in the idem.HeaderID ("Idem-Msg-Id") header and
// Message.Headers as record headers. Publish waits for every record's result.
//
// # When an ack means stored
//
// With acks=all a record is acknowledged once every in-sync replica has it. That
// means stored only if the topic has replication.factor 3 and min.insync.replicas 2
// (on the topic or the brokers): with min.insync.replicas 1 the in-sync set may be
// the leader alone, and the record dies with it. Kafka acknowledges from the page
// cache and relies on replication, not fsync, for durability, so the replicas must
// be in different failure domains; unclean.leader.election.enable must stay false.
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
// Acknowledged offsets are committed in the background as soon as an Ack moves
// them, one commit at a time (the acks that arrive meanwhile go out together in
// the next one, so an inbox acknowledging a batch costs about one commit per
// batch), retried every SourceConfig.CommitInterval if a commit fails, when
// partitions are revoked, on Close, and when Source.Commit is called. Ack itself
// is local and returns at once. So a crash redelivers the records in flight and
// at most one commit's worth of acknowledged ones, which the inbox recognises.
// A delivery that is never settled holds its partition's commits back until the
// source closes: settle every delivery.
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
// # Lag
//
// Source.Lag (idem.LagReporter) sums, over the partitions of SourceConfig.Topics,
// the end offset minus the group's committed offset (where nothing is committed,
// minus where the group would start), in three requests whatever the partition
// count. Since the source commits up to a partition's first unacknowledged record,
// that is the records not delivered plus those delivered and not acknowledged, for
// the whole group. Transaction markers take offsets, so on a transactional topic it
// overcounts by those ahead of the commit.
//
// # Offsets in the database
//
// For effects in a SQL database, the inbox can store a record's next offset (see
// Offset) in the same transaction as the effect, and SourceConfig.StoredOffsets
// returns those offsets when partitions are assigned. Consumption then resumes
// after the last committed effect, whatever the group's committed offset says.
// Acknowledge deliveries anyway: Ack is how the source forgets a record.
//
// # Read-process-write transactions
//
// When a pipeline's only effect is producing to Kafka, Kafka's own transactions
// make it exactly-once without an inbox: Transform consumes a batch, runs a
// TransformFunc on each record, produces the records it returns and commits the
// group's offsets for the batch, all in one transaction (franz-go's
// GroupTransactSession). Readers of the output topics that set isolation level
// read_committed then see each consumed record's outputs exactly once: a crash
// before the commit leaves an open transaction that is aborted, its offsets
// uncommitted, so the batch is consumed and produced again, and the aborted
// outputs stay invisible. Its consumers fetch read_committed too, so a
// pipeline reading another pipeline's output never sees aborted records.
//
// Three mechanisms cover the failures:
//
//   - A rebalance while a transaction is open aborts it (GroupTransactSession),
//     and the member rewinds to the committed offsets.
//   - Each worker's producer has transactional ID TransactionalID-i. A restarted
//     instance with the same ID fences the producers of the one it replaces (the
//     coordinator bumps the producer epoch and aborts what was left open), so a
//     "zombie" that was only paused cannot commit late: it stops with ErrFenced.
//   - Offsets are committed with the consumer group's generation (KIP-447) and
//     fetched with RequireStable, so a new owner of a partition waits for the old
//     owner's transaction to end before reading its offset.
//
// A TransformFunc error aborts the batch and it is retried after RetryDelay
// (doubling, up to MaxRetryDelay); an error marked idem.Permanent dead-letters
// the record to TransformConfig.DeadLetterTopic in the same transaction, or
// stops Run if there is none. A transaction left open by a crashed instance that
// never comes back holds up read_committed readers of the partitions it wrote to
// until the broker aborts it at TransactionTimeout (10s by default).
//
// What it does not cover: effects outside Kafka (a database write, an HTTP
// call) are not in the transaction and happen again on every retry; use the
// inbox for them. Readers that use read_uncommitted (the Java default is
// read_uncommitted too) see aborted outputs. The Source, Sink and inbox of this
// package do not use transactions.
//
// Spans: idem.kafka.transaction per transaction (outcome committed, aborted or
// failed) and idem.kafka.transform per record, a child of the trace in the
// record's headers and linked to its transaction; the outputs carry the record
// span's traceparent. Metrics: idem_kafka_transactions_total{group,outcome},
// idem_kafka_transform_records_total{group,kind} and
// idem_kafka_transaction_duration_seconds{group}.
//
// The tests run on kfake, which implements the transaction protocol
// (InitProducerID with epoch fencing, AddPartitionsToTxn, AddOffsetsToTxn,
// TxnOffsetCommit, EndTxn, transaction timeouts, read_committed fetches with the
// last stable offset and aborted-transaction index, RequireStable offset
// fetches). It completes transactions synchronously in memory: there are no
// PREPARE_COMMIT/PREPARE_ABORT states, no transaction log, no replication and no
// coordinator failover, so CONCURRENT_TRANSACTIONS retries, a coordinator moving
// mid-transaction and marker writes lost to a broker crash are not exercised;
// its throughput is an upper bound for a real cluster's.
package idemkafka
