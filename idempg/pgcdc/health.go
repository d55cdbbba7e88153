package pgcdc

import (
	"sync"
	"time"
)

// Health is a relay's own account of its progress, for a health check: a relay
// whose messages wait while nothing is published, or that cannot stream, is stuck
// whatever its database connection says.
type Health struct {
	// Streaming is true while this relay holds the slot and reads it; false on a
	// standby, and between sessions.
	Streaming bool
	// WaitingSince is when the oldest message read and neither acknowledged by the
	// broker nor parked was read (it stays across failed sessions); zero when none
	// waits.
	WaitingSince time.Time
	// LastPublished is when the broker last acknowledged messages; zero before.
	LastPublished time.Time
	// FailingSince is when the relay stopped streaming on a failure (of the broker,
	// the connection, the server); zero while it streams, and on a standby.
	FailingSince time.Time
	// LastError is the latest failure of a session or a publication; nil once the
	// messages read were all settled since.
	LastError error
	// Parked is how many messages this relay parked since it started.
	Parked int64
	// SlotLoss is the last replication slot this relay found lost (missing, or
	// invalidated) and re-created: nil when none was. While SlotLoss.Finished is
	// zero the relay is publishing the outbox rows committed in the gap.
	SlotLoss *SlotLoss
}

// Stalled says what is stuck at now, if anything: messages that waited for longer
// than bound with nothing published meanwhile ("messages wait and none was
// published"), or a relay that has failed to stream for longer than bound ("the
// relay cannot stream the slot"); and for how long. what is "" for a relay that is
// not stuck.
func (h Health) Stalled(now time.Time, bound time.Duration) (what string, d time.Duration) {
	if !h.WaitingSince.IsZero() {
		since := h.WaitingSince
		if h.LastPublished.After(since) {
			since = h.LastPublished
		}
		if now.Sub(since) > bound {
			return "messages wait and none was published", now.Sub(since)
		}
	}
	if l := h.SlotLoss; l != nil && l.Finished.IsZero() && now.Sub(l.Detected) > bound {
		return "the replication slot was lost and its gap is not recovered yet", now.Sub(l.Detected)
	}
	if !h.FailingSince.IsZero() && now.Sub(h.FailingSince) > bound {
		return "the relay cannot stream the slot", now.Sub(h.FailingSince)
	}
	return "", 0
}

// Health returns the relay's progress; it is safe to call while Run runs.
func (r *Relay) Health() Health {
	r.prog.mu.Lock()
	defer r.prog.mu.Unlock()
	return r.prog.h
}

// progress is the state behind Relay.Health.
type progress struct {
	mu sync.Mutex
	h  Health
}

func (p *progress) update(f func(h *Health)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.h)
}

// waiting records that a message was read and waits for the broker.
func (p *progress) waiting(now time.Time) {
	p.update(func(h *Health) {
		if h.WaitingSince.IsZero() {
			h.WaitingSince = now
		}
	})
}

// settled records that every message read so far is acknowledged or parked.
func (p *progress) settled(now time.Time, published bool) {
	p.update(func(h *Health) {
		h.WaitingSince, h.LastError = time.Time{}, nil
		if published {
			h.LastPublished = now
		}
	})
}

// streaming records that a session started reading.
func (p *progress) streaming() {
	p.update(func(h *Health) { h.Streaming, h.FailingSince = true, time.Time{} })
}

// standby records that another relay reads the slot: its messages are not this
// relay's to wait for.
func (p *progress) standby() {
	p.update(func(h *Health) { h.Streaming, h.FailingSince, h.WaitingSince = false, time.Time{}, time.Time{} })
}

// failed records the failure that ended a session.
func (p *progress) failed(now time.Time, err error) {
	p.update(func(h *Health) {
		h.Streaming, h.LastError = false, err
		if h.FailingSince.IsZero() {
			h.FailingSince = now
		}
	})
}
