package idemkafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var _ idem.LagReporter = (*Source)(nil)

// Lag sums, over every partition of SourceConfig.Topics, the partition's end
// offset minus the group's committed offset: the records the group has not
// committed, which are those not yet delivered plus those delivered and not yet
// acknowledged (the source commits up to a partition's first unacknowledged
// record). It takes three requests whatever the number of partitions (metadata,
// list offsets, offset fetch), from this source's client, and counts for the
// whole group, not just this member's partitions.
//
// A partition the group has no committed offset for counts from where the group
// would start: the log start under the default reset offset, the end under
// kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), which then counts nothing on
// that partition until the group's first commit there, though records published
// after the group joined wait to be consumed. Offsets count records of a
// plain producer exactly; transaction markers each take an offset, so on a
// transactional topic Lag overcounts by the markers not yet committed past.
// Acknowledged records count until their commit lands, which the source sends as
// soon as an Ack moves a partition's commit point.
func (s *Source) Lag(ctx context.Context) (idem.Lag, error) {
	parts, err := s.partitions(ctx)
	if err != nil {
		return idem.Lag{}, lagError("metadata", err)
	}
	start, err := s.listOffsets(ctx, parts, -2)
	if err != nil {
		return idem.Lag{}, lagError("list start offsets", err)
	}
	end, err := s.listOffsets(ctx, parts, -1)
	if err != nil {
		return idem.Lag{}, lagError("list end offsets", err)
	}
	committed, err := s.committed(ctx, parts)
	if err != nil {
		return idem.Lag{}, lagError("offset fetch", err)
	}
	reset, _ := s.client.OptValue(kgo.ConsumeResetOffset).(kgo.Offset)
	var lag int64
	for tp, e := range end {
		from, ok := committed[tp]
		if !ok {
			from = resetPoint(reset.EpochOffset().Offset, start[tp], e)
		}
		lag += max(0, e-max(from, start[tp]))
	}
	return idem.Lag{Messages: lag}, nil
}

func lagError(op string, err error) error {
	return &idem.BackendError{Backend: backend, Op: "lag: " + op, Err: err}
}

// resetPoint is where a partition without a committed offset starts: at -2 is
// the log start, -1 the end, anything else an exact offset.
func resetPoint(at, start, end int64) int64 {
	switch {
	case at == -1:
		return end
	case at < 0:
		return start
	}
	return min(at, end)
}

// partitions returns the partitions of the source's topics.
func (s *Source) partitions(ctx context.Context) (map[string][]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range s.cfg.Topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, mt)
	}
	resp, err := req.RequestWith(ctx, s.client)
	if err != nil {
		return nil, err
	}
	parts := make(map[string][]int32)
	for _, t := range resp.Topics {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("topic %q: %w", name, err)
		}
		for _, p := range t.Partitions {
			parts[name] = append(parts[name], p.Partition)
		}
	}
	return parts, nil
}

// listOffsets returns each partition's offset at timestamp ts: -2 the log start,
// -1 the end (the offset the next record will take).
func (s *Source) listOffsets(ctx context.Context, parts map[string][]int32, ts int64) (map[topicPartition]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	for t, ps := range parts {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = t
		for _, p := range ps {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.Timestamp = ts
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.client)
	if err != nil {
		return nil, err
	}
	out := make(map[topicPartition]int64)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("topic %q partition %d: %w", t.Topic, p.Partition, err)
			}
			out[topicPartition{t.Topic, p.Partition}] = p.Offset
		}
	}
	return out, nil
}

// committed returns the group's committed offsets; a partition without one is
// left out.
func (s *Source) committed(ctx context.Context, parts map[string][]int32) (map[topicPartition]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = s.cfg.Group
	for t, ps := range parts {
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic = t
		rt.Partitions = ps
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, s.client)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil // not joined yet (kfake, newer brokers): nothing committed
	} else if err != nil {
		return nil, fmt.Errorf("group %q: %w", s.cfg.Group, err)
	}
	out := make(map[topicPartition]int64)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("group %q topic %q partition %d: %w", s.cfg.Group, t.Topic, p.Partition, err)
			}
			if p.Offset >= 0 {
				out[topicPartition{t.Topic, p.Partition}] = p.Offset
			}
		}
	}
	return out, nil
}
