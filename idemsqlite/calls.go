package idemsqlite

import (
	"context"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/otelx"
)

// Claim implements idem.Store. The claim is applied by the group-commit writer and
// is durable (under SyncFull) when Claim returns.
func (s *Store) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	ctx, span := s.tr.Claim(ctx, c.Key, false)
	start := s.m.Start()
	if err := c.Validate(); err != nil {
		otelx.EndClaim(span, idem.Result{}, err)
		return idem.Result{}, err
	}
	r, err := s.send(ctx, &op{kind: opClaim, claims: []idem.Claim{c.WithDefaults()}})
	if err != nil {
		s.m.Claim(c.Key.Scope, 0, err, start)
		otelx.EndClaim(span, idem.Result{}, err)
		return idem.Result{}, err
	}
	s.m.Claim(c.Key.Scope, r.results[0].Outcome, nil, start)
	otelx.EndClaim(span, r.results[0], nil)
	return r.results[0], nil
}

// ClaimBatch implements idem.BatchClaimer: every claim is validated first, then all
// are claimed in order in one transaction (the same key twice: the second sees the
// first). A database failure fails the whole batch and writes nothing.
func (s *Store) ClaimBatch(ctx context.Context, claims []idem.Claim) (out []idem.Result, err error) {
	ctx, span := s.tr.Batch(ctx, claims)
	defer func() { otelx.EndBatch(span, out, err) }()
	start := s.m.Start()
	cs := make([]idem.Claim, len(claims))
	for i, c := range claims {
		if err := c.Validate(); err != nil {
			return nil, err
		}
		cs[i] = c.WithDefaults()
	}
	if len(cs) == 0 {
		return nil, ctx.Err()
	}
	r, err := s.send(ctx, &op{kind: opClaimBatch, claims: cs})
	for i, c := range cs {
		var o idem.Outcome
		if err == nil {
			o = r.results[i].Outcome
		}
		s.m.Claim(c.Key.Scope, o, err, start)
	}
	if err != nil {
		return nil, err
	}
	return r.results, nil
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, k idem.Key, token uint64, result []byte) error {
	return s.tr.Finish(ctx, otelx.SpanStoreComplete, k, token, false, func(ctx context.Context) error {
		_, err := s.send(ctx, &op{kind: opComplete, key: k, token: token, result: result})
		return err
	})
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, k idem.Key, token uint64) error {
	return s.tr.Finish(ctx, otelx.SpanStoreRelease, k, token, false, func(ctx context.Context) error {
		_, err := s.send(ctx, &op{kind: opRelease, key: k, token: token})
		return err
	})
}

// Renew implements idem.Renewer through the group-commit writer, like Release.
func (s *Store) Renew(ctx context.Context, k idem.Key, token uint64, lease time.Duration) error {
	return s.tr.Renew(ctx, k, token, lease, func(ctx context.Context, lease time.Duration) error {
		_, err := s.send(ctx, &op{kind: opRenew, key: k, token: token, lease: lease})
		return err
	})
}

// Sweep implements idem.Sweeper. It deletes expired records in transactions of at
// most Config.SweepBatch rows, each queued to the writer like any other call, until
// a batch comes back short. Run it periodically with storekit.RunSweeper.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	total := 0
	defer func() { s.m.Swept(total) }()
	for {
		r, err := s.send(ctx, &op{kind: opSweep, limit: s.cfg.SweepBatch})
		total += r.n
		if err != nil || r.n < s.cfg.SweepBatch {
			return total, err
		}
	}
}

// send hands o to the writer and waits for its answer.
//
// A context that has ended before the call returns ctx.Err() and writes nothing.
// One that ends while o is queued also returns ctx.Err(), and o is never applied.
// Once the writer has taken o into a transaction (it holds the write lock by then),
// o will be applied, so send waits for the true answer rather than report an
// error for a claim that in fact succeeded; that wait is one commit.
func (s *Store) send(ctx context.Context, o *op) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, err
	}
	o.done = make(chan reply, 1)
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return reply{}, idem.ErrClosed
	}
	select {
	case s.w.queue <- o:
		s.mu.RUnlock()
	case <-ctx.Done():
		s.mu.RUnlock()
		return reply{}, ctx.Err()
	}
	select {
	case r := <-o.done:
		return r, r.err
	case <-ctx.Done():
		if o.state.CompareAndSwap(queued, abandoned) {
			return reply{}, ctx.Err()
		}
		r := <-o.done
		return r, r.err
	}
}
