package chaos

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/idemhq/idem"
)

// Faults of the outbox → broker boundary, injected by Sink.
const (
	// FaultRelayCrash: the relay dies after the broker stored the messages and
	// before it marked them published; a restarted relay publishes them again.
	FaultRelayCrash = "relay_killed_after_publish"
	// FaultPublishError: the broker refuses a publish (unreachable, overloaded).
	FaultPublishError = "publish_failed"
)

// Faults of the broker → consumer boundary, injected by Source and Handler.
const (
	// FaultDuplicateDelivery: the broker delivers a message once more.
	FaultDuplicateDelivery = "duplicate_delivery"
	// FaultLostAck: the consumer's ack never reaches the broker, which redelivers.
	FaultLostAck = "ack_lost"
	// FaultCrashBeforeEffect: the consumer dies after receiving, before the effect.
	FaultCrashBeforeEffect = "consumer_killed_before_effect"
	// FaultCrashAfterEffect: the consumer dies after the effect, before its commit.
	FaultCrashAfterEffect = "consumer_killed_before_commit"
	// FaultCrashAfterCommit: the consumer dies after its commit, before the ack.
	FaultCrashAfterCommit = "consumer_killed_before_ack"
	// FaultPaused: the consumer stalls inside its transaction for longer than the
	// broker's ack wait, so the message is redelivered to another consumer meanwhile;
	// then it wakes and tries to commit.
	FaultPaused = "consumer_paused_past_lease"
)

// HeaderFault carries, on a delivered message, the fault Source chose for the
// handler (Handler reads it); it is not part of the message's fingerprint.
const HeaderFault = "Chaos-Fault"

// Tally counts attempts per identity (a message id, a request key): how many
// operations, how many distinct identities. It is safe for concurrent use.
type Tally struct {
	mu  sync.Mutex
	per map[string]int
	n   int
}

// Add counts one attempt of id and returns its number (1 for the first).
func (t *Tally) Add(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.per == nil {
		t.per = make(map[string]int)
	}
	t.per[id]++
	t.n++
	return t.per[id]
}

// Total is the number of attempts, Distinct the number of identities.
func (t *Tally) Total() int    { t.mu.Lock(); defer t.mu.Unlock(); return t.n }
func (t *Tally) Distinct() int { t.mu.Lock(); defer t.mu.Unlock(); return len(t.per) }

// Sink wraps a Sink with publish faults. Kill is called when a relay crash is
// injected: it must stop the relay that owns this sink (cancel its context), so
// that nothing marks the just-published messages.
type Sink struct {
	Sink     idem.Sink
	Injector *Injector
	Faults   []Fault
	Kill     func()
	// OnFault receives the other kinds in Faults before the publish (a flow's
	// connection cut).
	OnFault func(kind string)
	// Tally, if set, counts every message handed to Publish.
	Tally *Tally
	// Sent, if set, counts every message passed on to Sink: not those an
	// injected publish error stopped. A message sent twice is a copy the broker
	// may store twice (after a crash between publish and mark, or a publish that
	// failed once it had left).
	Sent *Tally
}

// Publish publishes msgs, perhaps with a fault. One call is one operation: a relay
// publishes a batch at once, and a fault hits the batch.
func (s *Sink) Publish(ctx context.Context, msgs ...idem.Message) error {
	if len(msgs) == 0 {
		return s.Sink.Publish(ctx, msgs...)
	}
	n := 1
	for i, m := range msgs {
		if s.Tally != nil {
			if k := s.Tally.Add(m.ID); i == 0 {
				n = k
			}
		}
	}
	fault := s.Injector.Roll("publish "+msgs[0].ID, n, s.Faults)
	switch fault {
	case FaultPublishError:
		return fmt.Errorf("%w: %s", ErrInjected, fault)
	case FaultRelayCrash:
		if err := s.send(ctx, msgs); err != nil {
			return err
		}
		if s.Kill != nil {
			s.Kill()
		}
		return fmt.Errorf("%w: %s", ErrInjected, fault)
	case "":
	default:
		if s.OnFault != nil {
			s.OnFault(fault)
		}
	}
	return s.send(ctx, msgs)
}

// send passes msgs on to the wrapped sink, counting them in Sent.
func (s *Sink) send(ctx context.Context, msgs []idem.Message) error {
	if s.Sent != nil {
		for _, m := range msgs {
			s.Sent.Add(m.ID)
		}
	}
	return s.Sink.Publish(ctx, msgs...)
}

// Source wraps a Source with delivery faults. Faults hit single deliveries
// (FaultDuplicateDelivery, FaultLostAck; other kinds are marked with HeaderFault);
// BatchFaults hit the consumer process once per Receive, at one delivery of the
// batch (FaultCrashBeforeEffect, FaultCrashAfterEffect, FaultPaused through
// HeaderFault for Handler; FaultCrashAfterCommit at that delivery's ack). Kill must
// stop the consumer that owns this source (cancel its context): it is a crash.
type Source struct {
	Source      idem.Source
	Injector    *Injector
	Faults      []Fault
	BatchFaults []Fault
	// BatchScale multiplies the injector's rate for BatchFaults; 0 means 1.
	BatchScale float64
	Kill       func()
	// Tally, if set, counts every delivery, injected duplicates included.
	Tally *Tally
	// Firsts, if set, counts the deliveries the broker numbered first
	// (Delivery.Attempt 1), injected duplicates not included: where the broker
	// counts attempts, a message delivered first more than once was stored more
	// than once (a relay's copy), not redelivered.
	Firsts *Tally
	// AckWait is the broker's redelivery wait. A source that keeps its unsettled
	// deliveries from redelivery (a RenewalPauser, or KeepsUnsettled) would keep
	// one whose ack was dropped until it closes, so its lost acks are Naks of
	// AckWait instead: the message comes back when a real lost ack's would.
	AckWait time.Duration
	// KeepsUnsettled says the broker redelivers an unsettled delivery only when
	// the consumer's channel closes: AMQP 0-9-1 has no ack wait, and an ack
	// that TCP carries is lost only with its connection, which requeues the
	// rest too (a cut). Dropping the ack alone there would hold the delivery,
	// and a prefetch slot, until the channel's end; its lost acks are Naks of
	// AckWait, as a RenewalPauser's are.
	KeepsUnsettled bool
}

// Receive returns the next deliveries, some of them with faults.
func (s *Source) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := s.Source.Receive(ctx, max)
	if err != nil || len(ds) == 0 {
		return ds, err
	}
	out := make([]idem.Delivery, 0, len(ds))
	attempts := make([]int, len(ds))
	for i, d := range ds {
		n := 1
		if s.Tally != nil {
			n = s.Tally.Add(d.ID)
		}
		attempts[i] = n
		if s.Firsts != nil && d.Attempt == 1 {
			s.Firsts.Add(d.ID)
		}
		switch fault := s.Injector.Roll("deliver "+d.ID, n, s.Faults); fault {
		case "":
			out = append(out, d)
		case FaultDuplicateDelivery:
			dup := d
			dup.Settler = noSettle{}
			if s.Tally != nil {
				s.Tally.Add(d.ID)
			}
			out = append(out, d, dup)
		case FaultLostAck:
			lost := lostAck{Settler: d.Settler}
			if _, renews := s.Source.(RenewalPauser); renews || s.KeepsUnsettled {
				lost.nakAfter = s.AckWait
			}
			d.Settler = lost
			out = append(out, d)
		default:
			out = append(out, mark(d, fault))
		}
	}
	if len(s.BatchFaults) > 0 {
		at := int(fnvHash(ds[0].ID) % uint64(len(out)))
		scale := s.BatchScale
		if scale == 0 {
			scale = 1
		}
		switch fault := s.Injector.RollScaled("process "+ds[0].ID, attempts[0], scale, s.BatchFaults); fault {
		case "":
		case FaultCrashAfterCommit:
			out[at].Settler = lostAck{Settler: out[at].Settler, kill: s.Kill}
		case FaultPaused:
			out[at] = mark(out[at], fault)
			if p, ok := s.Source.(RenewalPauser); ok {
				// A paused process renews nothing: its source's renewals stop
				// until the batch's first settle.
				resume := p.PauseRenewals()
				for i := range out {
					out[i].Settler = resuming{out[i].Settler, resume}
				}
			}
		default:
			out[at] = mark(out[at], fault)
		}
	}
	return out, nil
}

// mark sets HeaderFault on a copy of d's headers.
func mark(d idem.Delivery, fault string) idem.Delivery {
	h := make(map[string]string, len(d.Headers)+1)
	maps.Copy(h, d.Headers)
	h[HeaderFault] = fault
	d.Headers = h
	return d
}

// Close closes the wrapped source.
func (s *Source) Close() error { return s.Source.Close() }

// noSettle settles an injected duplicate: the broker knows one delivery only.
type noSettle struct{}

func (noSettle) Ack(context.Context) error                { return nil }
func (noSettle) Nak(context.Context, time.Duration) error { return nil }

// RenewalPauser is a Source that keeps its unsettled deliveries from redelivery
// (idemnats.Source, idemredis.StreamSource, idempubsub.Source, idemsqs.Source,
// queue.Source) and can stop doing so, as a paused process
// stops: Source pauses it for a batch with FaultPaused.
type RenewalPauser interface {
	PauseRenewals() (resume func())
}

// resuming resumes its source's renewals at the delivery's settle.
type resuming struct {
	idem.Settler
	resume func()
}

func (r resuming) Ack(ctx context.Context) error {
	r.resume()
	return r.Settler.Ack(ctx)
}

func (r resuming) Nak(ctx context.Context, delay time.Duration) error {
	r.resume()
	return r.Settler.Nak(ctx, delay)
}

// lostAck drops the ack (after calling kill, if set: the consumer died before it),
// or with nakAfter set Naks the delivery with that delay in its place.
type lostAck struct {
	idem.Settler
	kill     func()
	nakAfter time.Duration
}

func (l lostAck) Ack(ctx context.Context) error {
	if l.kill != nil {
		l.kill()
	}
	if l.nakAfter > 0 {
		_ = l.Settler.Nak(ctx, l.nakAfter)
	}
	return nil
}

// Handler wraps an inbox handler with the faults Source marked with HeaderFault:
// a crash before the effect, a crash after it and before the commit (both call
// kill and fail, so the transaction rolls back and the consumer stops), and a
// pause of pause inside the transaction after the effect.
func Handler[Tx any](h func(ctx context.Context, tx Tx, m idem.Message) error, pause time.Duration, kill func()) func(ctx context.Context, tx Tx, m idem.Message) error {
	return func(ctx context.Context, tx Tx, m idem.Message) error {
		switch m.Headers[HeaderFault] {
		case FaultCrashBeforeEffect:
			kill()
			return fmt.Errorf("%w: %s", ErrInjected, FaultCrashBeforeEffect)
		case FaultCrashAfterEffect:
			if err := h(ctx, tx, m); err != nil {
				return err
			}
			kill()
			return fmt.Errorf("%w: %s", ErrInjected, FaultCrashAfterEffect)
		case FaultPaused:
			if err := h(ctx, tx, m); err != nil {
				return err
			}
			time.Sleep(pause) // not the context: a paused process does not notice
			return nil
		}
		return h(ctx, tx, m)
	}
}
