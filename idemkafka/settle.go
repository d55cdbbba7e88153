package idemkafka

import (
	"container/heap"
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/brokerkit"
)

var (
	// ErrRevoked is returned by Ack and Nak of a delivery whose partition this
	// source no longer owns: it was revoked in a rebalance, lost with the group
	// session, or the source was closed. The settle has no effect; the partition's
	// new owner receives the record again from the group's committed offset (which
	// covered everything acknowledged before the revocation), and the inbox's dedup
	// makes that redelivery harmless. It is final: retrying the settle cannot help.
	ErrRevoked = errors.New("idemkafka: the record's partition was revoked from this consumer (rebalance, lost group session or Close); its new owner redelivers it")

	// ErrAcked is idem.ErrSettled, which Nak of a delivery already acknowledged
	// returns (as every second settle does): the acknowledgement cannot be taken
	// back, and the record is not redelivered.
	//
	// Deprecated: use idem.ErrSettled.
	ErrAcked = idem.ErrSettled
)

// settler settles one delivery of one record.
type settler struct {
	src      *Source
	e        *entry
	delivery uint32 // which delivery of e this is
	once     brokerkit.Once
}

var _ idem.Settler = (*settler)(nil)

// Ack marks the record done. It does not wait for Kafka: the offset is committed in
// the background right after (one commit at a time; retried every
// SourceConfig.CommitInterval if it fails), when the partition is revoked, and on
// Close, and only once every earlier record of the partition is acknowledged too. A crash before that commit redelivers the record, which the
// inbox recognises by its ID. A second settle of the delivery returns idem.ErrSettled;
// Ack of a revoked partition's record returns ErrRevoked.
func (st *settler) Ack(context.Context) error {
	return st.locked("ack", func(s *Source, e *entry) error {
		if e.state != stateAcked {
			e.part.ack(e)
			if _, dirty := e.part.dirty(); dirty {
				select { // wake commitLoop; a wake-up already pending covers this Ack too
				case s.acked <- struct{}{}:
				default:
				}
			}
		}
		return nil
	})
}

// Nak hands the record back for redelivery by this source's Receive after delay
// (Kafka cannot redeliver one record, so the adapter keeps it). Meanwhile the
// partition's committed offset stays before it, so a crash redelivers it as well.
// Nak of an earlier delivery of a record that was redelivered since, or of a
// record already waiting, does nothing; a second settle of the delivery (Nak after
// Ack or Nak) returns idem.ErrSettled.
func (st *settler) Nak(_ context.Context, delay time.Duration) error {
	return st.locked("nak", func(s *Source, e *entry) error {
		switch {
		case e.state == stateAcked:
			return brokerkit.Settled("idemkafka", "nak", position(e.rec)) // acknowledged through another delivery
		case e.state == stateWaiting || e.deliveries != st.delivery:
			return nil
		}
		e.state = stateWaiting
		e.due = time.Now().Add(max(delay, 0))
		heap.Push(&s.naks, e)
		s.wake()
		return nil
	})
}

// locked runs fn, the delivery's one settle, on its record under the source's
// lock; it returns ErrRevoked when the record's partition was revoked and
// idem.ErrSettled when the delivery was settled before.
func (st *settler) locked(op string, fn func(s *Source, e *entry) error) error {
	s := st.src
	s.mu.Lock()
	defer s.mu.Unlock()
	if !st.e.part.owned {
		return ErrRevoked
	}
	if !st.once.Begin() {
		return brokerkit.Settled("idemkafka", op, position(st.e.rec))
	}
	return fn(s, st.e)
}

// Offset returns where a delivery of a Source sits in Kafka, for the inbox's
// "offsets in the database" mode: store offset+1 for (topic, partition) in the
// transaction of the effect, and return it from SourceConfig.StoredOffsets, so
// consumption resumes after the last effect that committed whatever the group's
// committed offset says. ok is false for a delivery from another adapter.
func Offset(d idem.Delivery) (topic string, partition int32, offset int64, ok bool) {
	st, ok := d.Settler.(*settler)
	if !ok {
		return "", 0, 0, false
	}
	r := st.e.rec
	return r.Topic, r.Partition, r.Offset, true
}
