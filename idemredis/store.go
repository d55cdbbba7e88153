package idemredis

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/storekit"
	"github.com/redis/go-redis/v9"
)

const backend = "redis"

// Store is an idem.Store on Redis. It is safe for concurrent use. The zero value is
// not usable; call New.
type Store struct {
	client   redis.UniversalClient
	prefix   string
	m        *metrics.Store
	tr       otelx.StoreTracer
	claim    *redis.Script
	complete *redis.Script
	release  *redis.Script
	renew    *redis.Script
	// waitReplicas and waitTimeout are Config.WaitReplicas and WaitTimeout.
	waitReplicas int
	waitTimeout  time.Duration
}

var (
	_ idem.Store        = (*Store)(nil)
	_ idem.BatchClaimer = (*Store)(nil)
	_ idem.Renewer      = (*Store)(nil)
)

// New returns a Store that keeps its records in client: a *redis.Client, a
// *redis.ClusterClient, a *redis.Ring or a failover client. The store does not own
// the client; closing it is the caller's business. New sends no command: scripts
// are loaded on first use.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, &idem.InputError{Field: "client", Reason: "is nil",
			Fix: "pass a connected client, e.g. redis.NewClient(&redis.Options{Addr: \"localhost:6379\"})"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkWaitClient(client, cfg); err != nil {
		return nil, err
	}
	m, err := metrics.NewStore(cfg.Registerer, backend)
	if err != nil {
		return nil, err
	}
	return &Store{
		client:   client,
		prefix:   cfg.Prefix,
		m:        m,
		tr:       otelx.NewStoreTracer(cfg.TracerProvider, backend),
		claim:    redis.NewScript(claimLua),
		complete: redis.NewScript(completeLua),
		release:  redis.NewScript(releaseLua),
		renew:    redis.NewScript(renewLua),

		waitReplicas: cfg.WaitReplicas,
		waitTimeout:  cfg.WaitTimeout,
	}, nil
}

// Key returns the Redis key that holds k's record, for inspection with redis-cli
// (the value is binary; see the package doc).
func (s *Store) Key(k idem.Key) string { return redisKey(s.prefix, k) }

// Claim implements idem.Store in one round trip.
func (s *Store) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	ctx, span := s.tr.Claim(ctx, c.Key, false)
	start := s.m.Start()
	if err := storekit.CheckClaim(ctx, c); err != nil {
		otelx.EndClaim(span, idem.Result{}, err)
		return idem.Result{}, err
	}
	c = c.WithDefaults()
	reply, err := s.runScript(ctx, s.claim, acquired, s.Key(c.Key), claimArgs(c)...).Result()
	var res idem.Result
	if err == nil {
		res, err = decodeClaim(c, reply)
	}
	if err != nil {
		err = backendError("claim", err)
	}
	s.m.Claim(c.Key.Scope, res.Outcome, err, start)
	otelx.EndClaim(span, res, err)
	return res, err
}

func claimArgs(c idem.Claim) []any {
	return []any{c.Fingerprint, millis(c.Lease), millis(c.Retention)}
}

// Complete implements idem.Store in one round trip.
func (s *Store) Complete(ctx context.Context, k idem.Key, token uint64, result []byte) error {
	return s.tr.Finish(ctx, otelx.SpanStoreComplete, k, token, false, func(ctx context.Context) error {
		return s.completeScript(ctx, k, token, result)
	})
}

// completeScript runs the complete script: the body of Complete.
func (s *Store) completeScript(ctx context.Context, k idem.Key, token uint64, result []byte) error {
	if result == nil {
		result = []byte{} // go-redis would send nil as "" anyway; be explicit
	}
	n, err := s.runScript(ctx, s.complete, replied1, s.Key(k), tokenArg(token), result).Int()
	if err != nil {
		return backendError("complete", err)
	}
	if n != replyOK {
		return idem.ErrLeaseLost
	}
	return nil
}

// Release implements idem.Store in one round trip. The key becomes a tombstone
// until the released lease would have ended; claims see it as free.
func (s *Store) Release(ctx context.Context, k idem.Key, token uint64) error {
	return s.tr.Finish(ctx, otelx.SpanStoreRelease, k, token, false, func(ctx context.Context) error {
		n, err := s.release.Run(ctx, s.client, []string{s.Key(k)}, tokenArg(token)).Int()
		if err != nil {
			return backendError("release", err)
		}
		return finishErr(n)
	})
}

// Renew implements idem.Renewer in one round trip: the record's expiry and its TTL
// become lease from now (rounded up to whole milliseconds), on Redis's clock.
func (s *Store) Renew(ctx context.Context, k idem.Key, token uint64, lease time.Duration) error {
	return s.tr.Renew(ctx, k, token, lease, func(ctx context.Context, lease time.Duration) error {
		n, err := s.runScript(ctx, s.renew, replied1, s.Key(k), tokenArg(token), millis(lease)).Int()
		if err != nil {
			return backendError("renew", err)
		}
		return finishErr(n)
	})
}

// finishErr is Release's and Renew's error for their script's reply.
func finishErr(reply int) error {
	switch reply {
	case replyOK:
		return nil
	case replyCompleted:
		return idem.ErrCompleted
	}
	return idem.ErrLeaseLost
}

// backendError wraps err for op. The wrapped error keeps context.Canceled and
// context.DeadlineExceeded matchable with errors.Is.
func backendError(op string, err error) error {
	var be *idem.BackendError
	if errors.As(err, &be) {
		return err
	}
	return &idem.BackendError{Backend: backend, Op: op, Err: err}
}
