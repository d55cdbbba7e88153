package inbox

import (
	"context"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemseq"
)

// SeqTracker records sequence numbers in the caller's transaction:
// *idemseq.SQLTracker[Tx] (idemseq.OpenSQL, idempg.NewSeqTracker).
type SeqTracker[Tx any] interface {
	CheckTx(ctx context.Context, tx Tx, producer string, epoch, seq uint64) (idemseq.Verdict, error)
}

// SeqFunc returns where a delivery sits in its producer's sequence: for Kafka the
// producer is "topic/partition" and seq the offset (idemkafka.Sequence). ok is false
// for a delivery without one; it is then deduplicated by its key as usual.
type SeqFunc func(d idem.Delivery) (producer string, epoch, seq uint64, ok bool)

// Option configures what Config cannot, because it depends on the transaction type.
type Option[Tx any] func(*Consumer[Tx])

// WithSequences deduplicates by position instead of by key: the broker's own sequence
// (a Kafka partition's offsets) is recorded in the effect's transaction as a watermark
// and a window per producer, so no row per message is kept. A redelivered offset is a
// duplicate; an offset below the tracker's window (redelivered after more than
// Window later offsets were applied) is dead-lettered as too_old rather than applied
// on a guess.
//
// Position dedup recognises redeliveries of one broker record, not a message that was
// published twice (two records, two positions): use it where producers do not
// republish, or keep key dedup.
func WithSequences[Tx any](t SeqTracker[Tx], f SeqFunc) Option[Tx] {
	return func(c *Consumer[Tx]) { c.seqs, c.seqOf = t, f }
}

// checkSeq is claim for a delivery deduplicated by its sequence number.
func (c *Consumer[Tx]) checkSeq(ctx context.Context, tx Tx, it *item, producer string, epoch, seq uint64) (fresh bool, err error) {
	v, err := c.seqs.CheckTx(ctx, tx, producer, epoch, seq)
	if err != nil {
		return false, err
	}
	switch v {
	case idemseq.Duplicate:
		it.v = duplicate
		return false, nil
	case idemseq.TooOld, idemseq.Fenced:
		it.v, it.kind = dead, v.String()
		it.err = fmt.Errorf("%s %d of %s (epoch %d) is %s: the sequence window can no longer tell whether it was applied",
			"sequence number", seq, producer, epoch, v)
		return false, c.insertDeadLetter(ctx, c.db.Querier(tx), it)
	}
	return true, nil
}
