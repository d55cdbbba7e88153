package idemkafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitTimeout bounds one offset commit, so an unreachable coordinator cannot hold
// a rebalance or Close forever. A commit that times out is retried by the next
// one; meanwhile its records would only be redelivered.
const commitTimeout = 10 * time.Second

// commitLoop commits acknowledged offsets until ctx ends: as soon as an Ack moves
// a partition's acknowledged prefix (one commit at a time, so the acks that arrive
// during a commit go out together in the next one), and every CommitInterval,
// which retries a commit that failed. Committing promptly is what bounds the
// redelivery after a crash to the records in flight: the inbox acknowledges a
// batch after its transaction commits, and the group has the offsets one round
// trip later, instead of up to a CommitInterval later.
func (s *Source) commitLoop(ctx context.Context) {
	defer close(s.loopDone)
	t := time.NewTicker(s.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.acked:
		}
		cctx, cancel := context.WithTimeout(ctx, commitTimeout)
		if err := s.commit(cctx, nil, false); err != nil && ctx.Err() == nil {
			s.logError("background offset commit failed; retrying at the next interval", err)
		}
		cancel()
	}
}

// onRevoked runs when partitions leave this member (a rebalance, or Close leaving
// the group). It commits what was acknowledged in them, then drops them, so a later
// settle of their records returns ErrRevoked and cannot move an offset the new owner
// already resumed from.
func (s *Source) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	cctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	if err := s.commit(cctx, revoked, true); err != nil {
		s.logError("commit of revoked partitions failed; their acknowledged records since the last commit will be redelivered", err)
	}
}

// onLost runs when the group session ended without a clean revocation (the member
// was kicked out, e.g. it missed the session timeout). A commit would be refused, so
// the partitions are only dropped; their records since the last commit are
// redelivered to the new owners.
func (s *Source) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, partitions := range lost {
		for _, partition := range partitions {
			tp := topicPartition{topic, partition}
			if p := s.parts[tp]; p != nil {
				p.owned = false
				delete(s.parts, tp)
			}
		}
	}
}

// commit commits the acknowledged prefix of the partitions in only (of every owned
// partition when only is nil). With drop, it also gives those partitions up, under
// the same lock that took their offsets, so no Ack lands between the two.
func (s *Source) commit(ctx context.Context, only map[string][]int32, drop bool) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()

	offsets := make(map[string]map[int32]kgo.EpochOffset)
	sent := make(map[*partition]int64)
	visit := func(tp topicPartition, p *partition) {
		if eo, ok := p.dirty(); ok {
			if offsets[tp.topic] == nil {
				offsets[tp.topic] = make(map[int32]kgo.EpochOffset)
			}
			offsets[tp.topic][tp.partition] = eo
			sent[p] = eo.Offset
		}
		if drop {
			p.owned = false
			delete(s.parts, tp)
		}
	}
	s.mu.Lock()
	if only == nil {
		for tp, p := range s.parts {
			visit(tp, p)
		}
	} else {
		for topic, partitions := range only {
			for _, partition := range partitions {
				tp := topicPartition{topic, partition}
				if p := s.parts[tp]; p != nil {
					visit(tp, p)
				}
			}
		}
	}
	s.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}

	if err := commitSync(ctx, s.client, offsets); err != nil {
		return err
	}
	s.mu.Lock()
	for p, off := range sent {
		p.committed = max(p.committed, off)
	}
	s.mu.Unlock()
	return nil
}

// commitSync commits offsets and waits for the group's answer, failing on the
// request's error or the first partition's error.
func commitSync(ctx context.Context, client *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) error {
	var rerr error
	client.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			rerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && rerr == nil {
					rerr = fmt.Errorf("topic %s partition %d: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	return rerr
}

// adjustOffsets replaces the group's committed offsets of newly assigned partitions
// by those SourceConfig.StoredOffsets returns from the database. An error ends the
// group session; the member rejoins and asks again.
func (s *Source) adjustOffsets(ctx context.Context, fetched map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	assigned := make(map[string][]int32, len(fetched))
	for topic, partitions := range fetched {
		for partition := range partitions {
			assigned[topic] = append(assigned[topic], partition)
		}
	}
	stored, err := s.cfg.StoredOffsets(ctx, assigned)
	if err != nil {
		s.logError("SourceConfig.StoredOffsets failed; rejoining the group to ask again", err)
		return nil, err
	}
	for topic, partitions := range stored {
		for partition, next := range partitions {
			if _, ok := fetched[topic][partition]; ok && next >= 0 {
				fetched[topic][partition] = kgo.NewOffset().At(next).WithEpoch(-1)
			}
		}
	}
	return fetched, nil
}
