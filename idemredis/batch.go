package idemredis

import (
	"context"

	"github.com/idemhq/idem"
	"github.com/redis/go-redis/v9"
)

// ClaimBatch implements idem.BatchClaimer: every claim is validated, then all are
// sent as one pipeline of EVALSHA calls (one round trip per Redis node). Claims of
// the same key are answered in order, so a repeated key gets InProgress.
//
// If the round trip fails the whole batch returns an error; claims that Redis had
// already acquired are held until their leases end, as after a crashed worker.
func (s *Store) ClaimBatch(ctx context.Context, claims []idem.Claim) ([]idem.Result, error) {
	return s.tr.ClaimBatch(ctx, claims, func(ctx context.Context) ([]idem.Result, error) {
		return s.claimBatchCounted(ctx, claims)
	})
}

// claimBatchCounted is ClaimBatch's body, once its claims are checked: claimBatch,
// counted.
func (s *Store) claimBatchCounted(ctx context.Context, claims []idem.Claim) ([]idem.Result, error) {
	start := s.m.Start()
	out := make([]idem.Result, len(claims))
	err := s.claimBatch(ctx, claims, out)
	for i, c := range claims {
		s.m.Claim(c.Key.Scope, out[i].Outcome, err, start)
	}
	if err != nil {
		return nil, backendError("claim", err)
	}
	return out, nil
}

func (s *Store) claimBatch(ctx context.Context, claims []idem.Claim, out []idem.Result) error {
	if s.waitReplicas > 0 {
		return s.claimBatchWaited(ctx, claims, out)
	}
	all := make([]int, len(claims))
	for i := range all {
		all[i] = i
	}
	cmds := s.runClaims(ctx, claims, all)
	var missing []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		// A node's script cache was flushed (or the node is new): those claims did not
		// run. Load the script on every node and send only them again, in order, so
		// claims that ran on other nodes are not answered twice.
		if err := s.claim.Load(ctx, s.client).Err(); err != nil {
			return err
		}
		for j, cmd := range s.runClaims(ctx, claims, missing) {
			cmds[missing[j]] = cmd
		}
	}
	return decodeClaims(claims, cmds, out)
}

// runClaims pipelines one EVALSHA for each claim at the indices idx. Each command
// carries its own error; Exec's (the first of them) adds nothing.
func (s *Store) runClaims(ctx context.Context, claims []idem.Claim, idx []int) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(idx))
	hash := s.claim.Hash()
	p := s.client.Pipeline()
	for j, i := range idx {
		c := claims[i].WithDefaults()
		cmds[j] = p.EvalSha(ctx, hash, []string{s.Key(c.Key)}, claimArgs(c)...)
	}
	_, _ = p.Exec(ctx)
	return cmds
}

func isNoScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}

// claimBatchWaited is claimBatch with Config.WaitReplicas: one pipeline per master,
// each ending with WAIT (see runWaited).
func (s *Store) claimBatchWaited(ctx context.Context, claims []idem.Claim, out []idem.Result) error {
	calls := make([]scriptCall, len(claims))
	for i, c := range claims {
		c = c.WithDefaults()
		calls[i] = scriptCall{key: s.Key(c.Key), args: claimArgs(c)}
	}
	cmds, err := s.runWaited(ctx, s.claim, acquired, calls)
	if err != nil {
		return err
	}
	return decodeClaims(claims, cmds, out)
}

// decodeClaims reads each claim script's reply into out, in the order of claims:
// the first error (of a command or of its reply) fails the batch.
func decodeClaims(claims []idem.Claim, cmds []*redis.Cmd, out []idem.Result) error {
	for i, cmd := range cmds {
		reply, err := cmd.Result()
		if err == nil {
			out[i], err = decodeClaim(claims[i].WithDefaults(), reply)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
