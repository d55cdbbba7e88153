package idemredis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
)

// ErrNotReplicated is wrapped by the error of a call whose write fewer replicas
// acknowledged than Config.WaitReplicas asks for, within Config.WaitTimeout. The
// write itself happened on the master: a claim is held until its lease ends, a
// Complete may stand or be lost in a failover. Retrying the call is safe (a retried
// Complete of the same token waits again), and idem.IsRetryable reports true.
var ErrNotReplicated = errors.New("idemredis: write not acknowledged by enough replicas (WAIT)")

// waitAttempts bounds how often a waited write is sent again after its slot moved
// (MOVED, ASK, a dead or failing-over master): the cluster client's own retries do
// not apply to the master connection a waited write uses.
const waitAttempts = 6

// scriptCall is one script call on one key.
type scriptCall struct {
	key  string
	args []any
}

// wroteFunc tells from a script's reply whether the script wrote: only calls that
// wrote need their WAIT met. A claim that found the key taken, or a Complete or
// Renew that found the lease lost, wrote nothing, and its answer stands whatever
// WAIT says.
type wroteFunc func(reply any) bool

// acquired is the claim script's wroteFunc: a token (an integer) means it wrote.
func acquired(reply any) bool { _, ok := reply.(int64); return ok }

// replied1 is the complete and renew scripts' wroteFunc.
func replied1(reply any) bool { n, ok := reply.(int64); return ok && n == replyOK }

// checkWaitClient refuses a client WAIT cannot follow: a Ring has no replicas and
// no way to reach the master of a key on one connection.
func checkWaitClient(client redis.UniversalClient, cfg Config) error {
	if cfg.WaitReplicas == 0 {
		return nil
	}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
		return nil
	}
	return &idem.InputError{Field: "Config.WaitReplicas", Reason: fmt.Sprintf("needs a *redis.Client, a failover client or a *redis.ClusterClient (got %T)", client),
		Fix: "set WaitReplicas to 0 for this client, or use a Redis Cluster or a primary with replicas"}
}

// runScript runs sc on one key: through the client as usual, or, with
// Config.WaitReplicas, followed by WAIT on the same connection to the key's master.
func (s *Store) runScript(ctx context.Context, sc *redis.Script, wrote wroteFunc, key string, args ...any) *redis.Cmd {
	if s.waitReplicas == 0 {
		return sc.Run(ctx, s.client, []string{key}, args...)
	}
	cmds, err := s.runWaited(ctx, sc, wrote, []scriptCall{{key, args}})
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return cmds[0]
}

// runWaited runs sc once per call, grouped by the master of each call's key: per
// master one pipeline on one connection, EVALSHA for each call (EVAL where the
// script cache lacks it) and then WAIT, so WAIT covers exactly those writes. A
// call whose slot moved is sent again to the new master after the cluster state is
// reloaded, at most waitAttempts times. The error is for the whole batch: a WAIT
// that fell short, or a call that could not be sent; a script's own error stays in
// its command.
func (s *Store) runWaited(ctx context.Context, sc *redis.Script, wrote wroteFunc, calls []scriptCall) ([]*redis.Cmd, error) {
	out := make([]*redis.Cmd, len(calls))
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	for attempt := 1; ; attempt++ {
		groups, err := s.byMaster(ctx, calls, todo)
		if err != nil {
			return nil, err
		}
		var (
			mu      sync.Mutex
			wg      sync.WaitGroup
			again   []int
			lastErr error
		)
		for node, idx := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmds, moved, err := s.runOnMaster(ctx, node, sc, wrote, calls, idx)
				mu.Lock()
				defer mu.Unlock()
				for j, i := range idx {
					out[i] = cmds[j]
				}
				again = append(again, moved...)
				if err != nil {
					lastErr = err
				}
			}()
		}
		wg.Wait()
		if lastErr != nil {
			return nil, lastErr
		}
		cc, cluster := s.client.(*redis.ClusterClient)
		if len(again) == 0 || !cluster {
			return out, nil // on one node, go-redis has retried already: each command keeps its error
		}
		if attempt == waitAttempts {
			return nil, fmt.Errorf("%d writes found their slot moving %d times: %w", len(again), attempt, out[again[0]].Err())
		}
		cc.ReloadState(ctx)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
		todo = again
	}
}

// byMaster groups the calls at idx by the master of their key.
func (s *Store) byMaster(ctx context.Context, calls []scriptCall, idx []int) (map[*redis.Client][]int, error) {
	groups := map[*redis.Client][]int{}
	switch c := s.client.(type) {
	case *redis.Client:
		groups[c] = idx
	case *redis.ClusterClient:
		for _, i := range idx {
			m, err := c.MasterForKey(ctx, calls[i].key)
			if err != nil {
				return nil, err
			}
			groups[m] = append(groups[m], i)
		}
	default:
		return nil, fmt.Errorf("WAIT needs a *redis.Client or *redis.ClusterClient, not %T", s.client)
	}
	return groups, nil
}

// runOnMaster sends the calls at idx to node in one pipeline ending with WAIT. It
// returns each call's command, the indices of calls to send again elsewhere (their
// slot moved, or the node could not be reached), and an error when WAIT fell
// short for a pipeline in which a call wrote. A pipeline whose commands got NOSCRIPT is sent once more with EVAL, again
// ending with WAIT (possibly on another connection, which is why each pipeline
// waits for its own writes).
func (s *Store) runOnMaster(ctx context.Context, node *redis.Client, sc *redis.Script, wrote wroteFunc, calls []scriptCall, idx []int) ([]*redis.Cmd, []int, error) {
	cmds := make([]*redis.Cmd, len(idx))
	pending := make([]int, len(idx)) // positions in idx still to send
	for j := range pending {
		pending[j] = j
	}
	for _, eval := range []bool{false, true} {
		p := node.Pipeline()
		sent := make([]*redis.Cmd, len(pending))
		for k, j := range pending {
			c := calls[idx[j]]
			if eval {
				sent[k] = sc.Eval(ctx, p, []string{c.key}, c.args...)
			} else {
				sent[k] = sc.EvalSha(ctx, p, []string{c.key}, c.args...)
			}
		}
		wait := p.Do(ctx, "wait", s.waitReplicas, s.waitTimeout.Milliseconds())
		_, _ = p.Exec(ctx)
		var noScript []int
		mustWait := false
		for k, j := range pending {
			cmds[j] = sent[k]
			if isNoScript(sent[k].Err()) {
				noScript = append(noScript, j)
			} else if sent[k].Err() == nil && wrote(sent[k].Val()) {
				mustWait = true
			}
		}
		if mustWait {
			n, err := wait.Int64()
			if err != nil {
				return cmds, nil, err
			}
			if n < int64(s.waitReplicas) {
				return cmds, nil, fmt.Errorf("%w: %d of %d replicas of %s within %v",
					ErrNotReplicated, n, s.waitReplicas, node.Options().Addr, s.waitTimeout)
			}
		}
		if len(noScript) == 0 {
			break
		}
		pending = noScript
	}
	var moved []int
	for j, cmd := range cmds {
		if movedErr(cmd.Err()) {
			moved = append(moved, idx[j])
		}
	}
	return cmds, moved, nil
}

// movedErr reports whether a waited write must go to another node: its slot moved
// or is moving, the cluster is failing over, or its master could not be reached
// (the cluster state then names a new one, or the same after a retry).
func movedErr(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "READONLY"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false // a reply from Redis: the script's own error
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
