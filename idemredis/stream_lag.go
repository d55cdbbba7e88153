package idemredis

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemhq/idem"
)

var _ idem.LagReporter = (*StreamSource)(nil)

// Lag asks Redis for the group's XINFO GROUPS entry (one command, whatever the
// stream's length) and returns its lag (entries not yet delivered to the group)
// plus its pending count (delivered to one of its consumers, not yet XACKed). Both
// are Redis's exact counts; it needs Redis 7.0 or later, which reports lag.
//
// Before the group exists (no Receive reached Redis yet), Lag is the stream's
// length (XLEN): the group starts at the stream's first entry. Redis cannot count
// the lag after entries between the group's last delivered entry and the stream's
// end were deleted (XDEL), or after XGROUP SETID: it reports no lag until the
// group has read past them. Lag then returns an error that says so rather than a
// guess, since the stream's length, the only bounded estimate, also counts entries
// the group has already consumed. Once the group has read past deleted entries,
// Redis 7.0 reports a lag again but still counts them (entries-added minus
// entries-read); Lag corrects that where it can tell for sure, when the group has
// delivered the stream's last entry (then nothing is undelivered), and otherwise
// reports Redis's figure, which may exceed the truth by the entries deleted.
func (s *StreamSource) Lag(ctx context.Context) (idem.Lag, error) {
	groups, err := s.client.XInfoGroups(ctx, s.cfg.Stream).Result()
	if err != nil && !strings.Contains(err.Error(), "no such key") {
		return idem.Lag{}, &idem.BackendError{Backend: backend, Op: "xinfo groups",
			Err: fmt.Errorf("stream %q: %w", s.cfg.Stream, err)}
	}
	for _, g := range groups {
		if g.Name != s.cfg.Group {
			continue
		}
		if g.Lag < 0 {
			return idem.Lag{}, &idem.BackendError{Backend: backend, Op: "xinfo groups", Err: fmt.Errorf(
				"stream %q group %q: Redis cannot count the entries not yet delivered (entries were deleted after the group's last delivered entry, or its position was set); it can again once the group reads past them",
				s.cfg.Stream, s.cfg.Group)}
		}
		undelivered, err := s.undelivered(ctx, g.Lag, g.LastDeliveredID)
		if err != nil {
			return idem.Lag{}, err
		}
		return idem.Lag{Messages: undelivered + g.Pending}, nil
	}
	n, err := s.client.XLen(ctx, s.cfg.Stream).Result()
	if err != nil {
		return idem.Lag{}, &idem.BackendError{Backend: backend, Op: "xlen",
			Err: fmt.Errorf("stream %q: %w", s.cfg.Stream, err)}
	}
	return idem.Lag{Messages: n}, nil
}

// undelivered corrects Redis's lag of a group whose last delivered entry is
// lastID: 0 when lastID is the stream's last entry (Redis 7.0 can still count
// deleted entries then), Redis's lag otherwise. One XREVRANGE of one entry, and
// only when Redis reports a lag.
func (s *StreamSource) undelivered(ctx context.Context, lag int64, lastID string) (int64, error) {
	if lag == 0 {
		return 0, nil
	}
	last, err := s.client.XRevRangeN(ctx, s.cfg.Stream, "+", "-", 1).Result()
	if err != nil {
		return 0, &idem.BackendError{Backend: backend, Op: "xrevrange",
			Err: fmt.Errorf("stream %q: %w", s.cfg.Stream, err)}
	}
	if len(last) == 0 || last[0].ID == lastID {
		return 0, nil
	}
	return lag, nil
}
