package inbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
)

// The reasons a delivery is refused before its key is claimed: each is also its
// dead letter's kind and the reason label of idem_inbox_refused_total.
const (
	// RefusedStaleKey: the key's embedded time is older than Config.MaxKeyAge. Its
	// record may have been forgotten, so applying it could apply it twice.
	RefusedStaleKey = "stale_key"
	// RefusedFutureKey: the key is dated more than idemkey.MaxSkew ahead of the
	// consumer's clock; accepted, it would stay fresh longer than its record.
	RefusedFutureKey = "future_key"
	// RefusedUntimedKey: the key carries no time and Config.RequireTimedKeys is set.
	RefusedUntimedKey = "untimed_key"
	// RefusedDeadline: the message's idem.HeaderDeadline has passed; its sender has
	// given up on it.
	RefusedDeadline = "deadline"
	// RefusedBadDeadline: the message's idem.HeaderDeadline is not a time, so
	// whether its sender still wants it cannot be told.
	RefusedBadDeadline = "bad_deadline"
)

// keyRetention is how long the consumer keeps each key's record: Retention, plus
// idemkey.MaxSkew while keys are judged, because a key dated up to MaxSkew ahead is
// accepted and stays fresh that much longer than MaxKeyAge after it arrives.
func (c Config) keyRetention() time.Duration {
	if c.MaxKeyAge < 0 {
		return c.Retention
	}
	return c.Retention + idemkey.MaxSkew
}

// refusal returns why the delivery d with key must not be applied at now, and the
// dead letter's kind, or "" when it may. A refused delivery is acked and
// dead-lettered without running the handler: a late one is discarded, not
// retried, and an operator who wants it applied all the same replays it (Replay
// does not judge keys or deadlines: the operator has).
//
// A delivery deduplicated by its sequence (WithSequences) has its key's age left
// alone: a sequence watermark forgets nothing, so a late one is still recognised
// (or dead-lettered as too_old), and a consumer reading old history applies it.
func (c *Consumer[Tx]) refusal(d idem.Delivery, key string, now time.Time) (kind string, err error) {
	if c.cfg.MaxKeyAge >= 0 && !c.bySequence(d) {
		if kind, err := c.checkKey(key, now); err != nil {
			return kind, err
		}
	}
	v, ok := d.Headers[idem.HeaderDeadline]
	if !ok || c.cfg.IgnoreDeadlines {
		return "", nil
	}
	deadline, err := idem.ParseDeadline(v)
	if err != nil {
		// Applying it could act after its sender gave up, and redelivering cannot
		// mend the header: the producer must. The operator sees it and may replay it.
		return RefusedBadDeadline, fmt.Errorf("refused before applying: %w; the producer must set it with idem.FormatDeadline (replay the letter to apply it anyway)", err)
	}
	if now.After(deadline) {
		return RefusedDeadline, fmt.Errorf("refused before applying: its %s %s passed %v before it arrived (consumer clock %s): the sender has given up on it; "+
			"replay the letter to apply it anyway, or give the sender a later deadline if the consumer is routinely behind",
			idem.HeaderDeadline, v, now.Sub(deadline), idem.FormatDeadline(now))
	}
	return "", nil
}

// checkKey judges a key's embedded time against MaxKeyAge.
func (c *Consumer[Tx]) checkKey(key string, now time.Time) (kind string, err error) {
	err = idemkey.CheckFresh(key, c.cfg.MaxKeyAge, now)
	var ie *idem.InputError
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, idemkey.ErrStale):
		return RefusedStaleKey, fmt.Errorf("refused before applying: %w (Config.MaxKeyAge); replay the letter if it must be applied anyway, "+
			"and keep Retention above the producers' retry horizon", err)
	case errors.Is(err, idemkey.ErrFuture):
		return RefusedFutureKey, fmt.Errorf("refused before applying: %w; replay the letter once that clock is right", err)
	case errors.As(err, &ie) && c.cfg.RequireTimedKeys:
		return RefusedUntimedKey, fmt.Errorf("refused before applying: key %q %s, and Config.RequireTimedKeys is set: "+
			"mint message ids with idemkey.NewV7 or NewULID (the outbox does, for a message enqueued without an ID), or unset RequireTimedKeys", key, ie.Reason)
	}
	return "", nil // no time to judge by
}
