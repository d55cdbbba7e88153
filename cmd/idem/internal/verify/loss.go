package verify

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"sync"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// FaultBrokerLoss: the broker acknowledges a publish and loses the message, as
// JetStream loses a write it acknowledged before syncing it to disk when the power
// fails. The relay's Publish returns nil, so the outbox marks the row published;
// no consumer ever gets it. Only the audit's repair (a copy of the row under the
// same id) brings it back. Counted once per message lost (Flow.BrokerLoss).
const FaultBrokerLoss = "broker_acked_lost"

// losses decides which messages the broker loses, and remembers them. The draw is
// a function of the run's seed and the message id, made at the id's first
// publish: a run with the same seed loses the same messages. A lost message stays
// lost for every publish of it until a repair of it is recorded: the relay's own
// copies (sent again after a crash between publish and mark, or a failed batch)
// are the same write, lost with it, so the fault's count is the number of
// messages no consumer can get without the audit. It is safe for concurrent use.
type losses struct {
	rate float64
	seed uint64
	// repaired reports whether the audit has recorded a repair of message id: its
	// copy may be on its way, and is let through.
	repaired func(ctx context.Context, id string) (bool, error)
	// count is called once per message lost, at its first loss.
	count func()

	mu    sync.Mutex
	seen  map[string]bool // ids drawn
	lost  map[string]bool // ids lost: true while no repair is recorded
	drops int             // publishes dropped (a lost message's copies included)
}

func newLosses(rate float64, seed int64, repaired func(context.Context, string) (bool, error), count func()) *losses {
	return &losses{rate: rate, seed: uint64(seed), repaired: repaired, count: count, seen: map[string]bool{}, lost: map[string]bool{}}
}

// drop reports whether the broker loses this publish of message id.
func (l *losses) drop(ctx context.Context, id string) (bool, error) {
	l.mu.Lock()
	held, wasLost := l.lost[id]
	if !l.seen[id] {
		l.seen[id] = true
		h := fnv.New64a()
		h.Write([]byte(id))
		if rand.New(rand.NewPCG(l.seed^h.Sum64(), 0xb055)).Float64() < l.rate {
			l.lost[id], l.drops = true, l.drops+1
			l.mu.Unlock()
			l.count()
			return true, nil
		}
	}
	l.mu.Unlock()
	if !wasLost || !held {
		return false, nil
	}
	// A lost message published again: the relay's own copy (lost with it), or the
	// audit's repair, recorded in the repair's transaction before the relay can
	// read its copy.
	ok, err := l.repaired(ctx, id)
	if err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok {
		l.lost[id] = false
		return false, nil
	}
	l.drops++
	return true, nil
}

// ids returns the ids of the messages lost.
func (l *losses) ids() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]bool, len(l.lost))
	for id := range l.lost {
		out[id] = true
	}
	return out
}

// dropped is the number of publishes lost, a lost message's copies included: what
// the broker acknowledged and does not hold.
func (l *losses) dropped() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.drops
}

// lossSink is the broker's side of FaultBrokerLoss: below the relay's fault
// injector (chaos.Sink), it acknowledges every message and forwards those the
// broker does not lose.
type lossSink struct {
	idem.Sink
	l *losses
}

func (s lossSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	keep := msgs[:0:0]
	for _, m := range msgs {
		lost, err := s.l.drop(ctx, m.ID)
		if err != nil {
			return err // the relay publishes the batch again
		}
		if !lost {
			keep = append(keep, m)
		}
	}
	if len(keep) == 0 && len(msgs) > 0 {
		return nil
	}
	return s.Sink.Publish(ctx, keep...)
}

// repairedIn reports whether db records a repair of message id
// (idem_outbox_repairs, written by the audit in its copy's transaction).
func repairedIn[Tx any](db idemsql.TxDB[Tx]) func(context.Context, string) (bool, error) {
	return func(ctx context.Context, id string) (bool, error) {
		var n int
		err := db.Auto(ctx, func(q idemsql.Querier) error {
			return q.QueryRow(ctx, "SELECT COUNT(*) FROM idem_outbox_repairs WHERE msg_id = $1", id).Scan(&n)
		})
		return n > 0, err
	}
}
