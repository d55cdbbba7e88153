package idempg

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/group"
	"github.com/idemhq/idem/storekit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Group claims: when concurrent Claims outnumber the pool's connections, the ones
// left over share round trips instead of queueing for a connection each.
//
// A Claim that finds fewer claims running than the pool has connections (MaxConns)
// goes to the server at once, alone, as without groups: one call of the function of
// migration 002 on a connection of its own. One that finds as many running waits in a
// queue, as it would have waited for a connection; when a running claim returns, its
// runner takes the whole queue (up to Config.MaxClaimGroup) to the server in one
// call of the function of migration 003: one round trip, one transaction and one
// commit for all of them. So no claim ever waits for a group to fill, and the round
// trips and commits per claim fall with the queue's length: a group commit, decided
// by the traffic and not by a timer.
//
// Why not fewer runners, as idemmysql has (two), so that groups form sooner? Measured
// at 16 clients on a 16-connection pool (BENCHMARKS.md), PostgreSQL's own group
// commit already shares the WAL flushes of concurrent transactions, and a claim's
// time is mostly its commit's: a group's call takes about as long as one claim's, so
// a claim that queues behind a running group (then runs in the next) takes about
// twice as long, and two runners gave half the claims per second of sixteen.
//
// A group never waits long for a row lock, so that one key held by a long
// transaction elsewhere (an inbox's ClaimTx holds a fresh key's row until it
// commits) cannot hold up the claims queued with it: the function runs under a
// lock_timeout of 50 ms, and when it runs out, or the call fails for any other
// reason, each claim of the group leaves the runner for a goroutine of its own that
// claims it as a Store without groups would, waiting as long as that takes. So do
// the claims of a key whose row expired or vanished meanwhile. Those goroutines are
// at most one per waiting caller. A lone claim waits for a lock as before, on its own
// runner, as it would on its own connection.
//
// ClaimTx never groups: it runs in the caller's transaction.

// DefaultMaxClaimGroup bounds the claims of one group call.
const DefaultMaxClaimGroup = 64

// maxMaxClaimGroup bounds Config.MaxClaimGroup: past a few hundred a group's
// transaction holds its keys longer and gains nothing more per claim.
const maxMaxClaimGroup = 1000

type grouper struct {
	s        *core[pgx.Tx]
	pool     *pgxpool.Pool
	b        group.Batcher[claimCall]
	calls    atomic.Int64 // group function calls, for tests
	handOffs atomic.Int64 // claims handed to goroutines of their own, for tests
}

// claimCall is one claim in a group: the claim (defaults applied) and its answer.
type claimCall struct {
	c   idem.Claim
	res idem.Result
}

type pendingClaim = group.Item[claimCall]

func newGrouper(s *core[pgx.Tx], pool *pgxpool.Pool, maxGroup int) *grouper {
	g := &grouper{s: s, pool: pool}
	g.b = group.Batcher[claimCall]{Runners: max(int(pool.Config().MaxConns), 1), Max: maxGroup, Run: g.answer}
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
	return p.Val.res, p.Err
}

// answer claims live's keys in one call, finishes each claim it answered, and hands
// the others to goroutines of their own.
func (g *grouper) answer(live []*pendingClaim) {
	if len(live) == 1 {
		p := live[0]
		var err error
		p.Val.res, err = g.s.claimLoop(p.Ctx, g.s.db, p.Val.c)
		p.Finish(err)
		return
	}
	g.calls.Add(1)
	rest := g.claimGroup(live)
	for _, p := range live {
		if !slices.Contains(rest, p) {
			p.Finish(nil)
		}
	}
	for _, p := range rest {
		g.handOff(p)
	}
}

// handOff claims p on a goroutine of its own, as a Store without groups would.
func (g *grouper) handOff(p *pendingClaim) {
	g.handOffs.Add(1)
	go func() {
		var err error
		p.Val.res, err = g.s.claimLoop(p.Ctx, g.s.db, p.Val.c)
		p.Finish(err)
	}()
}

// groupRow is one answer row of the group function.
type groupRow struct {
	ours, expired    bool
	state            int16
	fp, result       []byte
	token            int64
	created, expires time.Time
}

// claimGroup claims batch in one call of the group function and fills in the answers
// it can; it returns the claims to run again alone: keys whose row expired or
// vanished meanwhile, or the whole batch if the call failed (a lock wait that ran
// out, a failure).
func (g *grouper) claimGroup(batch []*pendingClaim) (rest []*pendingClaim) {
	// Key order, so that two groups lock shared keys in one order (no deadlock).
	slices.SortStableFunc(batch, func(a, b *pendingClaim) int {
		return cmp.Or(cmp.Compare(a.Val.c.Key.Scope, b.Val.c.Key.Scope), cmp.Compare(a.Val.c.Key.ID, b.Val.c.Key.ID))
	})
	ctx, cancel := group.Context(batch)
	defer cancel()
	rows, err := g.call(ctx, batch)
	if err != nil {
		return batch
	}
	first := make(map[idem.Key]bool, len(batch))
	for i, p := range batch {
		r, ok := rows[i]
		k := p.Val.c.Key
		switch {
		case !ok:
			rest = append(rest, p)
		case r.ours && !first[k]:
			first[k] = true
			p.Val.res = idem.Result{Outcome: idem.Acquired, Token: uint64(r.token)}
		case r.expired:
			rest = append(rest, p)
		default:
			// A live row: another holder's, or this group's own for a key it
			// repeats (the first claim of it got the token).
			first[k] = true
			rec := idem.Record{State: idem.StateInProgress, Fingerprint: r.fp, Result: r.result,
				CreatedAt: r.created, ExpiresAt: r.expires}
			if r.state == stateCompleted {
				rec.State = idem.StateCompleted
			}
			p.Val.res = storekit.Existing(p.Val.c, rec)
		}
	}
	return rest
}

// call runs the group function on batch and returns its rows by index in batch.
func (g *grouper) call(ctx context.Context, batch []*pendingClaim) (map[int]groupRow, error) {
	n := len(batch)
	scopes, ids, fps := make([]string, n), make([]string, n), make([][]byte, n)
	leases, retentions := make([]int64, n), make([]int64, n)
	for i, p := range batch {
		c := p.Val.c
		scopes[i], ids[i], fps[i] = c.Key.Scope, c.Key.ID, c.Fingerprint
		leases[i], retentions[i] = micros(c.Lease), micros(c.Retention)
	}
	rs, err := g.pool.Query(ctx, g.s.q.claimGroup, scopes, ids, fps, leases, retentions)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := make(map[int]groupRow, n)
	for rs.Next() {
		var i int32
		var r groupRow
		if err := rs.Scan(&i, &r.ours, &r.state, &r.fp, &r.token, &r.result, &r.created, &r.expires, &r.expired); err != nil {
			return nil, err
		}
		out[int(i)-1] = r
	}
	return out, rs.Err()
}
