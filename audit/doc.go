// Package audit proves a live flow end to end: it reconciles the messages an
// outbox published with what each consumer of their topics applied or
// dead-lettered, and repairs what a broker acknowledged and then lost.
//
// idem guards each boundary of a flow, but a message the broker acknowledged and
// then lost (JetStream acknowledges before it syncs to disk by default; an async
// Kafka replica; a purged queue; an operator's mistake) vanishes silently: the
// outbox marked it published, no consumer ever saw it. idem owns both ends, and
// they carry the same id: the outbox row's msg_id is the message id the relay
// publishes, which the inbox records as its key (inbox.Config.Key's default).
// An Auditor joins them, database to database, in bounded pages:
//
//	producer: idem_outbox, published in [now-Window, now)   (keyset pages on published_at, id)
//	consumer: its key records (scope = consumer) and idem_dead_letters, looked up by id
//
// and reports, per topic and consumer, the messages published, applied,
// dead-lettered, missing (published longer ago than Grace, neither applied nor
// dead-lettered) and in flight, with the latency from enqueue to applied. The
// producer and each consumer may be in different databases, of different kinds.
//
// With Config.Repair, a missing message is republished: a copy of its outbox
// row, under the same msg_id, which the relay publishes like any other row (the
// polling relay and the log-based one alike), so that a consumer that did get the
// message drops the copy by its key. A message a consumer of its topic
// dead-lettered is never republished (replay the letter instead), nor one of a
// topic a blind consumer reads; every repair is recorded in idem_outbox_repairs
// (Auditor.Repairs).
//
// What it cannot see, it says: a consumer that holds no key record at all (one
// keyed by something else than the message id, or that deduplicates by sequence
// or LSN and keeps a position instead of a key per message) is reported Blind and
// its messages are counted as published only. A window longer than half a
// consumer's key retention is refused: a forgotten key would read as missing.
//
// Report.Sentence states the design documents' sentence for the flow, measured;
// the idem_audit_* metrics carry the same figures.
package audit
