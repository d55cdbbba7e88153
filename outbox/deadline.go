package outbox

import (
	"maps"
	"time"

	"github.com/idemhq/idem"
)

// WithDeadline returns m carrying deadline as its idem.HeaderDeadline, for
// EnqueueTx: the time after which its consumers must not act on it, because the
// producer has given up by then (a reply it waits for, an offer that lapses). The
// headers are copied: m's map is not modified.
//
//	ob.EnqueueTx(ctx, tx, outbox.WithDeadline(msg, time.Now().Add(5*time.Minute)))
//
// The relay publishes such a message even when it reaches it after the deadline (a
// relay that was down): the consumer judges it by its own clock, and an inbox
// refuses it there, acked, counted and dead-lettered with kind "deadline", where an
// operator can still replay it. Parking it in the outbox as well would add a second
// clock to judge by (the relay's) and a second place to clear; what it would save is
// the broker's traffic for messages the relay reaches late.
func WithDeadline(m idem.Message, deadline time.Time) idem.Message {
	h := make(map[string]string, len(m.Headers)+1)
	maps.Copy(h, m.Headers)
	h[idem.HeaderDeadline] = idem.FormatDeadline(deadline)
	m.Headers = h
	return m
}
