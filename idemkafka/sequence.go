package idemkafka

import (
	"fmt"
	"strconv"

	"github.com/idemhq/idem"
)

// Sequence places a delivery in its partition's sequence for the inbox's dedup by
// position (inbox.WithSequences): producer "topic/partition", epoch 0, and the offset,
// read from Delivery.Topic and Delivery.Position, so it works through wrappers of the
// delivery's Settler. Recorded in the effect's transaction, it replaces a row per
// message with one watermark per partition. It recognises redeliveries of one
// record; a message published twice is two records with two offsets, so use it only
// where the producer does not republish (the idempotent producer's own retries are
// fine).
func Sequence(d idem.Delivery) (producer string, epoch, seq uint64, ok bool) {
	var partition int32
	var offset int64
	if n, err := fmt.Sscanf(d.Position, "partition %d offset %d", &partition, &offset); err != nil || n != 2 || offset < 0 || d.Topic == "" {
		return "", 0, 0, false
	}
	return d.Topic + "/" + strconv.Itoa(int(partition)), 0, uint64(offset), true
}
