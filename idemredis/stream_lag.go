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
// the group has already consumed.
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
		return idem.Lag{Messages: g.Lag + g.Pending}, nil
	}
	n, err := s.client.XLen(ctx, s.cfg.Stream).Result()
	if err != nil {
		return idem.Lag{}, &idem.BackendError{Backend: backend, Op: "xlen",
			Err: fmt.Errorf("stream %q: %w", s.cfg.Stream, err)}
	}
	return idem.Lag{Messages: n}, nil
}
