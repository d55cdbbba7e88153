package idemmysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/group"
	"github.com/idemhq/idem/storekit"
)

// Group claims: concurrent Claims share round trips.
//
// A Claim that finds fewer than groupRunners claims running goes to the server at
// once, alone, as before. One that finds them all busy waits in a queue; when a
// running claim returns, its runner takes the whole queue (up to
// Config.MaxClaimGroup) to the server in one call of the procedure of migration 003,
// one transaction and one commit for all of them. So a lone caller never waits for a
// batch to fill, and under load the round trips and commits per claim fall with the
// queue's length: a group commit, decided by the traffic and not by a timer.
//
// A runner never waits for a row lock, so that one key held by a long transaction
// elsewhere cannot hold up the claims of other keys queued behind it: its calls run
// with innodb_lock_wait_timeout 0, and a claim that meets a lock (or a taken key,
// whose row must be read, or an expired one) leaves the runner for a goroutine of
// its own that claims it as a Store without groups would, waiting as long as that
// takes. Those goroutines are at most one per waiting caller.

// groupRunners is how many claims or groups run at once per Store. Two keep the
// queue long enough to fill groups on two cores while one group commits.
const groupRunners = 2

// DefaultMaxClaimGroup bounds the claims of one group call.
const DefaultMaxClaimGroup = 64

type grouper struct {
	s     *Store
	b     group.Batcher[claimCall]
	calls atomic.Int64 // group procedure calls, for tests
}

// claimCall is one claim in a group: the claim (defaults applied) and its answer.
type claimCall struct {
	c   idem.Claim
	res idem.Result
}

type pendingClaim = group.Item[claimCall]

func newGrouper(s *Store, maxGroup int) *grouper {
	g := &grouper{s: s}
	g.b = group.Batcher[claimCall]{Runners: groupRunners, Max: maxGroup, Run: g.answer}
	return g
}

// claim runs c alone or in a group and waits for its answer or for ctx. A claim
// whose caller gave up may still be carried out by its group: like a claim whose
// answer was lost, it stays in progress until its lease ends.
func (g *grouper) claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	p, err := g.b.Do(ctx, claimCall{c: c.WithDefaults()})
	if err != nil {
		return idem.Result{}, err
	}
	return p.Val.res, nil
}

// answer claims batch's keys without waiting for a row lock, and finishes each claim
// it answered; the others it hands to goroutines of their own.
func (g *grouper) answer(live []*pendingClaim) {
	switch len(live) {
	case 1:
		p := live[0]
		res, done, err := g.s.callClaim(p.Ctx, p.Val.c, g.s.q.callClaimNoWait)
		if lockWait(err) || (err == nil && !done) {
			g.s.handOff(p)
			return
		}
		p.Val.res = res
		p.Finish(err)
	default:
		g.calls.Add(1)
		rest := g.s.claimGroup(live)
		for _, p := range live {
			if !slices.Contains(rest, p) {
				p.Finish(nil)
			}
		}
		for _, p := range rest {
			g.s.handOff(p)
		}
	}
}

// handOff claims p on a goroutine of its own, as a Store without groups would.
func (s *Store) handOff(p *pendingClaim) {
	go func() {
		var err error
		p.Val.res, err = s.claimAlone(p.Ctx, p.Val.c)
		p.Finish(err)
	}()
}

// lockWait reports whether err is innodb_lock_wait_timeout running out.
func lockWait(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1205 // ER_LOCK_WAIT_TIMEOUT
}

// claimGroup claims batch in one call of the group procedure, which waits for no
// row lock, and fills in the answers it can; it returns the claims to run again
// alone: keys whose row expired or vanished meanwhile, or the whole batch if the
// call failed.
func (s *Store) claimGroup(batch []*pendingClaim) (rest []*pendingClaim) {
	// Key order, so that two groups lock shared keys in one order (no deadlock).
	slices.SortStableFunc(batch, func(a, b *pendingClaim) int {
		return cmp.Or(cmp.Compare(a.Val.c.Key.Scope, b.Val.c.Key.Scope), cmp.Compare(a.Val.c.Key.ID, b.Val.c.Key.ID))
	})
	ctx, cancel := group.Context(batch)
	defer cancel()
	arg := groupJSON(batch)
	type row struct {
		ours, expired       bool
		state               int
		fp, result          []byte
		token, created, exp int64
	}
	rows := make(map[int]row, len(batch))
	err := func() error {
		rs, err := s.db.QueryContext(ctx, s.q.callGroup, arg)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var n int
			var r row
			if err := rs.Scan(&n, &r.ours, &r.state, &r.fp, &r.token, &r.result, &r.created, &r.exp, &r.expired); err != nil {
				return err
			}
			rows[n-1] = r
		}
		return rs.Err()
	}()
	if err != nil {
		// A lock met, a deadlock, a failure: each claim again on its own, where it
		// waits, is retried or fails by itself.
		return batch
	}
	first := make(map[idem.Key]bool, len(batch))
	for i, p := range batch {
		r, ok := rows[i]
		switch {
		case !ok || r.expired:
			rest = append(rest, p)
		case r.ours && !first[p.Val.c.Key]:
			first[p.Val.c.Key] = true
			p.Val.res = idem.Result{Outcome: idem.Acquired, Token: uint64(r.token)}
		default:
			// A live row: another holder's, or this group's own for a key it
			// repeats (the first claim of it got the token).
			first[p.Val.c.Key] = true
			rec := idem.Record{State: idem.StateInProgress, Fingerprint: r.fp, Result: r.result,
				CreatedAt: time.UnixMicro(r.created), ExpiresAt: time.UnixMicro(r.exp)}
			if r.state == stateCompleted {
				rec.State = idem.StateCompleted
			}
			p.Val.res = storekit.Existing(p.Val.c, rec)
		}
	}
	return rest
}

// groupJSON is the procedure's argument: scope, id and fingerprint in hex, so that
// any bytes pass, with lease and retention in microseconds.
func groupJSON(batch []*pendingClaim) string {
	b := make([]byte, 0, len(batch)*96)
	b = append(b, '[')
	for i, p := range batch {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"s":"`...)
		b = hex.AppendEncode(b, []byte(p.Val.c.Key.Scope))
		b = append(b, `","i":"`...)
		b = hex.AppendEncode(b, []byte(p.Val.c.Key.ID))
		b = append(b, `","f":"`...)
		b = hex.AppendEncode(b, p.Val.c.Fingerprint)
		b = append(b, `","l":`...)
		b = strconv.AppendInt(b, micros(p.Val.c.Lease), 10)
		b = append(b, `,"r":`...)
		b = strconv.AppendInt(b, micros(p.Val.c.Retention), 10)
		b = append(b, '}')
	}
	return string(append(b, ']'))
}

// claimAlone is a claim of its own: the claim procedure for a fresh key where
// there is one, then the statements.
func (s *Store) claimAlone(ctx context.Context, c idem.Claim) (idem.Result, error) {
	res, done, err := s.callClaim(ctx, c, s.q.callClaim)
	if !done && err == nil {
		err = s.ownTx(ctx, "claim", func(tx *sql.Tx) (err error) {
			res, err = s.claim(ctx, tx, c)
			return err
		})
	}
	return res, err
}
