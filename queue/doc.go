// Package queue is the database as the queue: no broker between a producer and
// its consumers when both use one database.
//
// A producer writes messages with Queue.EnqueueTx (or InsertTx, with run-at
// times and duplicate reports) in its business transaction, exactly as with
// package outbox. A consumer is an inbox.Consumer whose Source is a queue
// Source: it claims due messages of a topic (FOR UPDATE SKIP LOCKED on
// PostgreSQL and MySQL, SQLite's single writer), runs the handler, and, when
// the consumer's database is the queue's, retires each message in the
// handler's transaction. Claiming the message, applying its effect, recording
// its key and retiring it then commit together, or not at all: exactly once by
// construction, with no broker to run.
//
//	q, _ := queue.New(ctx, db, queue.Config{})
//	ids, _ := q.EnqueueTx(ctx, tx, idem.Message{Topic: "orders", Payload: body})
//	src, _ := q.Source(queue.SourceConfig{Topic: "orders"})
//	c, _ := inbox.New(ctx, src, db, store, apply, inbox.Config{Consumer: "ledger"})
//	go c.Run(ctx)
//
// # Leases
//
// A claim leases its messages to the Source for SourceConfig.Lease (30 s),
// renewed while the process lives. A claim counts an attempt, and the count is
// the lease's fencing token: retiring names the row by id and attempts, so a
// consumer whose lease ran out (paused, cut off) and whose message another
// consumer took can no longer retire it, and its transaction, effect included,
// rolls back. The inbox's key record is a second guard.
//
// # Throughput
//
// A Source alternates a claim (one statement, its own commit) and the batch the
// inbox makes of what it returned; SourceConfig.Prefetch runs the next claim
// while a batch is processed, and several consumers on one topic claim past
// each other. Larger inbox batches (Config.BatchSize) share one claim, one
// retire statement and one commit among their messages.
//
// # What a queue does
//
// Run-at times (Job.RunAt); retries with the inbox's backoff (a failed handler
// Naks: the message is due again after the delay) and its dead letters after
// inbox Config.MaxAttempts (the row is finished as "dead"); one unfinished
// message per topic and ID (a second enqueue is reported Duplicate);
// cancellation (Cancel, CancelTx); per ordering key, one message at a time in
// enqueue order; periodic schedules enqueued once per tick however many
// processes run them (Config.Periodic, Run); retention of finished messages
// (Config.Retention, swept by Run).
//
// A consumer in another database than the queue's works too, as with any
// broker: at least once, its inbox's keys dropping what comes twice; its
// messages finish as "acked".
package queue
