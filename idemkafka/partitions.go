package idemkafka

import (
	"container/heap"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// topicPartition names one partition of one topic.
type topicPartition struct {
	topic     string
	partition int32
}

// entryState is where a record taken from Kafka stands with the caller.
type entryState uint8

const (
	stateDelivered entryState = iota // returned by Receive, not settled yet
	stateWaiting                     // Nak'd: waits in the redelivery queue for its delay
	stateAcked                       // done; committable once every earlier record is too
)

// entry is one record the source took from Kafka and has not committed past.
type entry struct {
	rec   *kgo.Record
	part  *partition
	state entryState
	// deliveries counts Receive returning this record; a settler of an earlier
	// delivery is stale (its Nak no longer applies).
	deliveries uint32
	due        time.Time // when a waiting record is delivered again
	first      settler   // the settler of the first delivery, allocated with the entry
}

// partition tracks one owned partition's records from the first unacknowledged one
// on, so the committed offset can never pass a record whose effect is not done.
type partition struct {
	// owned turns false when the partition is revoked or lost (or the source
	// closed): its entries are then dead, and settling them returns ErrRevoked,
	// because the new owner redelivers them from the group's committed offset.
	owned bool
	// entries are the records taken from Kafka in offset order, starting with the
	// first one not acknowledged; acknowledged records after it wait their turn.
	entries []*entry
	// ackedTo is the commit point: the offset after the last record of the
	// acknowledged prefix, with that record's leader epoch. Offset -1: none yet.
	ackedTo kgo.EpochOffset
	// committed is the last offset the group accepted from this source (-1: none).
	committed int64
}

func newPartition() *partition {
	return &partition{owned: true, ackedTo: kgo.EpochOffset{Epoch: -1, Offset: -1}, committed: -1}
}

// add appends a record just polled; Kafka returns a partition's records in order.
func (p *partition) add(r *kgo.Record) *entry {
	e := &entry{rec: r, part: p}
	p.entries = append(p.entries, e)
	return e
}

// ack marks e done and moves the commit point over the acknowledged prefix.
func (p *partition) ack(e *entry) {
	e.state = stateAcked
	n := 0
	for n < len(p.entries) && p.entries[n].state == stateAcked {
		r := p.entries[n].rec
		p.ackedTo = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		p.entries[n] = nil // let the record be collected
		n++
	}
	p.entries = p.entries[n:]
}

// dirty returns the commit point if it is ahead of what the group has.
func (p *partition) dirty() (kgo.EpochOffset, bool) {
	return p.ackedTo, p.ackedTo.Offset > p.committed
}

// nakQueue holds Nak'd records by due time, earliest first. Entries acknowledged
// or revoked while they wait stay in the queue and are skipped when they surface.
type nakQueue []*entry

func (q nakQueue) Len() int           { return len(q) }
func (q nakQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q nakQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *nakQueue) Push(x any)        { *q = append(*q, x.(*entry)) }
func (q *nakQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// due pops up to max records whose delay has passed and that are still waiting on
// an owned partition. next is the due time of the earliest record left waiting
// (zero if none), so Receive knows when to stop polling Kafka and look again.
func (q *nakQueue) due(now time.Time, max int) (ready []*entry, next time.Time) {
	for q.Len() > 0 {
		e := (*q)[0]
		if e.state != stateWaiting || !e.part.owned {
			heap.Pop(q)
			continue
		}
		if e.due.After(now) {
			return ready, e.due
		}
		if len(ready) == max {
			return ready, e.due
		}
		heap.Pop(q)
		ready = append(ready, e)
	}
	return ready, time.Time{}
}
