package idempg

import (
	"context"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/group"
)

// SetNotifierCheck shortens how long n waits on a silent connection before it
// checks the connection, so a test sees several checks.
func SetNotifierCheck(n *Notifier, d time.Duration) { n.check = d }

// Offline returns cfg for a store on a server that is not there, for the tests of
// what its calls then return: the store skips even the schema check.
func Offline(cfg Config) Config {
	cfg.offline = true
	return cfg
}

// ListQuery returns the statement of s's List, for EXPLAIN.
func ListQuery(s *Store) string { return Driver().Records().ForTable(s.table).List }

// GroupCalls is how many group function calls s made.
func GroupCalls(s *Store) int64 {
	if s.group == nil {
		return 0
	}
	return s.group.calls.Load()
}

// HandOffs is how many claims s's groups handed to goroutines of their own.
func HandOffs(s *Store) int64 {
	if s.group == nil {
		return 0
	}
	return s.group.handOffs.Load()
}

// ClaimAsGroup sends claims to the group path as one batch, as a runner would, and
// returns a wait for each claim's answer.
func ClaimAsGroup(s *Store, ctx context.Context, claims []idem.Claim) []func() (idem.Result, error) {
	batch := make([]*pendingClaim, len(claims))
	waits := make([]func() (idem.Result, error), len(claims))
	for i, c := range claims {
		p := group.NewItem(ctx, claimCall{c: c.WithDefaults()})
		batch[i] = p
		waits[i] = func() (idem.Result, error) {
			if err := p.Wait(); err != nil {
				return idem.Result{}, err
			}
			return p.Val.res, nil
		}
	}
	s.group.answer(batch)
	return waits
}
