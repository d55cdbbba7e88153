package idemmem

import (
	"bytes"
	"context"
	"hash/maphash"
	"math"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/storekit"
)

func (s *Store) hash(k idem.Key) hkey {
	// Scope cannot contain NUL (Key.Validate), so scope+NUL+id is unambiguous.
	var h maphash.Hash
	h.SetSeed(s.seedA)
	h.WriteString(k.Scope)
	h.WriteByte(0)
	h.WriteString(k.ID)
	a := h.Sum64()
	h.SetSeed(s.seedB)
	h.WriteString(k.Scope)
	h.WriteByte(0)
	h.WriteString(k.ID)
	return hkey{a, h.Sum64()}
}

func (s *Store) shardOf(h hkey) *shard { return &s.shards[h.a&s.mask] }

// nextToken issues a token above every token this shard has issued. Tokens start
// at the clock in microseconds so they read as times and keep rising across restarts.
func (sh *shard) nextToken(now int64) uint64 {
	t := uint64(now / 1000)
	if t <= sh.last {
		t = sh.last + 1
	}
	sh.last = t
	return t
}

// Claim implements idem.Store.
func (s *Store) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	_, span := s.tr.Claim(ctx, c.Key, false)
	start := s.m.Start()
	if err := storekit.CheckClaim(ctx, c); err != nil {
		otelx.EndClaim(span, idem.Result{}, err)
		return idem.Result{}, err
	}
	res, err := s.claim(c.WithDefaults(), s.now().UnixNano())
	s.m.Claim(c.Key.Scope, res.Outcome, err, start)
	otelx.EndClaim(span, res, err)
	return res, err
}

// claim claims c at now. Only a key the store holds no record of can be refused
// for the budget: taking over an expired record reuses its room.
func (s *Store) claim(c idem.Claim, now int64) (idem.Result, error) {
	h := s.hash(c.Key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()

	size := liveRecordBytes + int64(len(c.Fingerprint))
	if old, ok := sh.live[h]; ok {
		if now < old.deadline {
			return s.duplicate(c, old), nil
		}
		s.charge(sh, size-liveSize(old))
	} else if d, ok := sh.done[h]; ok {
		if deadline := s.doneDeadline(d); now < deadline {
			return s.duplicate(c, liveRecord{deadline: deadline, completed: true}), nil
		}
		delete(sh.done, h)
		s.charge(sh, size-doneRecordBytes)
	} else if !s.take(sh, size) {
		return idem.Result{}, s.budget.full()
	}
	token := sh.nextToken(now)
	sh.live[h] = liveRecord{
		token:     token,
		deadline:  addDur(now, c.Lease),
		created:   now,
		retention: int64(c.Retention),
		fp:        bytes.Clone(c.Fingerprint),
	}
	s.remember(sh, h, c.Key)
	return idem.Result{Outcome: idem.Acquired, Token: token}, nil
}

func (s *Store) duplicate(c idem.Claim, r liveRecord) idem.Result {
	return storekit.Existing(c, r.record(c.Key))
}

// ClaimBatch implements idem.BatchClaimer: every claim is validated first, then
// claimed in order.
func (s *Store) ClaimBatch(ctx context.Context, claims []idem.Claim) ([]idem.Result, error) {
	return s.tr.ClaimBatch(ctx, claims, func(ctx context.Context) ([]idem.Result, error) { return s.claimBatch(ctx, claims) })
}

// claimBatch is ClaimBatch's body, once its claims are checked.
func (s *Store) claimBatch(ctx context.Context, claims []idem.Claim) (out []idem.Result, err error) {
	now := s.now().UnixNano()
	out = make([]idem.Result, len(claims))
	for i, c := range claims {
		start := s.m.Start()
		out[i], err = s.claim(c.WithDefaults(), now)
		s.m.Claim(c.Key.Scope, out[i].Outcome, err, start)
		if err != nil {
			// The batch fails as a whole: give back what it acquired, which no
			// caller ever saw.
			for j := range i {
				if out[j].Outcome == idem.Acquired {
					_ = s.Release(context.WithoutCancel(ctx), claims[j].Key, out[j].Token)
				}
			}
			return nil, err
		}
	}
	return out, nil
}

// lockKey locks the shard holding k and returns it, k's hash and the time now; the
// caller unlocks sh.mu.
func (s *Store) lockKey(k idem.Key) (sh *shard, h hkey, now int64) {
	now = s.now().UnixNano()
	h = s.hash(k)
	sh = s.shardOf(h)
	sh.mu.Lock()
	return sh, h, now
}

// retained returns h's compact record of a completed key, if sh holds one whose
// retention has not passed at now.
func (s *Store) retained(sh *shard, h hkey, now int64) (doneRecord, bool) {
	d, ok := sh.done[h]
	return d, ok && now < s.doneDeadline(d)
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, k idem.Key, token uint64, result []byte) error {
	return s.tr.Finish(ctx, otelx.SpanStoreComplete, k, token, false, func(context.Context) error {
		return s.complete(k, token, result)
	})
}

// complete is Complete's body, once its call is checked.
func (s *Store) complete(k idem.Key, token uint64, result []byte) error {
	sh, h, now := s.lockKey(k)
	defer sh.mu.Unlock()

	r, ok := sh.live[h]
	if !ok {
		if d, ok := s.retained(sh, h, now); ok && d.holds(token) {
			return nil // completed twice
		}
		return idem.ErrLeaseLost
	}
	if r.token != token || now >= r.deadline {
		return idem.ErrLeaseLost
	}
	if r.completed {
		return nil // completed twice: keep the first result
	}
	// The claim was admitted, so its completion is never refused for the budget:
	// the effect has run, and refusing to record it would let a retry run it again.
	deadline := addDur(now, time.Duration(r.retention))
	if len(r.fp) == 0 && len(result) == 0 {
		// Dedup only: keep the compact form.
		s.dropLive(sh, h, r)
		sh.done[h] = packDone(token, s.expirySec(deadline))
		s.charge(sh, doneRecordBytes)
		return nil
	}
	r.completed = true
	r.result = bytes.Clone(result)
	r.deadline = deadline
	sh.live[h] = r
	s.charge(sh, int64(len(r.result)))
	return nil
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, k idem.Key, token uint64) error {
	return s.tr.Finish(ctx, otelx.SpanStoreRelease, k, token, false, func(context.Context) error {
		return s.release(k, token)
	})
}

// release is Release's body, once its call is checked.
func (s *Store) release(k idem.Key, token uint64) error {
	sh, h, now := s.lockKey(k)
	defer sh.mu.Unlock()

	r, ok := sh.live[h]
	if !ok {
		if d, ok := s.retained(sh, h, now); ok {
			if d.holds(token) {
				return idem.ErrCompleted
			}
			return idem.ErrLeaseLost
		}
		return nil
	}
	switch {
	case now >= r.deadline:
		return nil // expired: as if absent
	case r.token != token:
		return idem.ErrLeaseLost
	case r.completed:
		return idem.ErrCompleted
	}
	s.dropLive(sh, h, r)
	s.forget(sh, h)
	return nil
}

// Renew implements idem.Renewer.
func (s *Store) Renew(ctx context.Context, k idem.Key, token uint64, lease time.Duration) error {
	return s.tr.Renew(ctx, k, token, lease, func(_ context.Context, lease time.Duration) error {
		return s.renew(k, token, lease)
	})
}

// renew is Renew's body, once its call is checked.
func (s *Store) renew(k idem.Key, token uint64, lease time.Duration) error {
	sh, h, now := s.lockKey(k)
	defer sh.mu.Unlock()

	r, ok := sh.live[h]
	if !ok {
		if d, ok := s.retained(sh, h, now); ok && d.holds(token) {
			return idem.ErrCompleted
		}
		return idem.ErrLeaseLost
	}
	switch {
	case r.token != token || now >= r.deadline:
		return idem.ErrLeaseLost
	case r.completed:
		return idem.ErrCompleted
	}
	r.deadline = addDur(now, lease)
	sh.live[h] = r
	return nil
}

// addDur adds d to the unix-ns time now, saturating instead of overflowing for
// absurdly long leases or retentions.
func addDur(now int64, d time.Duration) int64 {
	if int64(d) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(d)
}

// dropLive deletes h from the live map. Every claim passes through live and most
// leave it again on Complete, and a Go map keeps a tombstone for each deletion until it
// grows, so a map that holds a handful of records can fill with tombstones and make
// every probe long (a quarter of the CPU of a claim+complete pair, profiled). Once
// deletions outnumber the live records well, the map is rebuilt with just those:
// O(len) work after Ω(len) deletions, so O(1) amortized.
func (s *Store) dropLive(sh *shard, h hkey, r liveRecord) {
	s.charge(sh, -liveSize(r))
	delete(sh.live, h)
	sh.deletes++
	if sh.deletes < 2*len(sh.live)+1024 {
		return
	}
	live := make(map[hkey]liveRecord, len(sh.live))
	for k, r := range sh.live {
		live[k] = r
	}
	sh.live, sh.deletes = live, 0
}

// expirySec converts a deadline to whole seconds after the epoch, rounded up.
func (s *Store) expirySec(deadline int64) uint32 {
	sec := (deadline - s.epoch + int64(time.Second) - 1) / int64(time.Second)
	return uint32(min(max(sec, 0), math.MaxUint32))
}

func (s *Store) doneDeadline(d doneRecord) int64 {
	return s.epoch + int64(d.expirySec())*int64(time.Second)
}

// Sweep implements idem.Sweeper: it removes records whose lease or retention passed.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	n := 0
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		n += s.sweepShard(&s.shards[i], s.now().UnixNano())
	}
	s.m.Swept(n)
	return n, nil
}

func (s *Store) sweepShard(sh *shard, now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for h, r := range sh.live {
		if now >= r.deadline {
			s.dropLive(sh, h, r)
			s.forget(sh, h)
			n++
		}
	}
	for h, d := range sh.done {
		if now >= s.doneDeadline(d) {
			delete(sh.done, h)
			s.charge(sh, -doneRecordBytes)
			s.forget(sh, h)
			n++
		}
	}
	return n
}

// Len returns the number of records held, expired or not, until swept.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.live) + len(sh.done)
		sh.mu.Unlock()
	}
	return n
}
