package idemtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemhq/idem"
)

type linOp uint8

const (
	linClaim linOp = iota
	linComplete
	linRelease
	linRenew
)

// linInput is one call: Op on keys[Key] with Token (not for claims) and Result (for
// completions).
type linInput struct {
	Op     linOp
	Key    int
	Token  uint64
	Result string
}

func (in linInput) String() string {
	switch in.Op {
	case linClaim:
		return "Claim"
	case linComplete:
		return fmt.Sprintf("Complete(token %d, %q)", in.Token, in.Result)
	case linRelease:
		return fmt.Sprintf("Release(token %d)", in.Token)
	}
	return fmt.Sprintf("Renew(token %d)", in.Token)
}

type linErr uint8

const (
	linOK linErr = iota
	linLeaseLost
	linCompleted
)

// linOutput is a call's answer: for claims the outcome, the token (Acquired) and the
// result (Replayed); for the others which error.
type linOutput struct {
	Outcome idem.Outcome
	Token   uint64
	Result  string
	Err     linErr
}

func (out linOutput) String() string {
	switch {
	case out.Err == linLeaseLost:
		return "ErrLeaseLost"
	case out.Err == linCompleted:
		return "ErrCompleted"
	case out.Outcome == idem.Acquired:
		return fmt.Sprintf("acquired, token %d", out.Token)
	case out.Outcome == idem.Replayed:
		return fmt.Sprintf("replayed %q", out.Result)
	case out.Outcome != 0:
		return out.Outcome.String()
	}
	return "ok"
}

// The lease and retention of every claim: far longer than a run.
const linLease = time.Hour

func apply(ctx context.Context, s idem.Store, r idem.Renewer, k idem.Key, in linInput) (linOutput, error) {
	var err error
	switch in.Op {
	case linClaim:
		res, err := s.Claim(ctx, idem.Claim{Key: k, Fingerprint: []byte("fp"), Lease: linLease, Retention: linLease})
		if err != nil {
			return linOutput{}, err
		}
		out := linOutput{Outcome: res.Outcome}
		switch res.Outcome {
		case idem.Acquired:
			out.Token = res.Token
		case idem.Replayed:
			out.Result = string(res.Record.Result)
		}
		return out, nil
	case linComplete:
		err = s.Complete(ctx, k, in.Token, []byte(in.Result))
	case linRelease:
		err = s.Release(ctx, k, in.Token)
	case linRenew:
		err = r.Renew(ctx, k, in.Token, linLease)
	}
	switch {
	case err == nil:
		return linOutput{}, nil
	case errors.Is(err, idem.ErrLeaseLost):
		return linOutput{Err: linLeaseLost}, nil
	case errors.Is(err, idem.ErrCompleted):
		return linOutput{Err: linCompleted}, nil
	}
	return linOutput{}, err
}

// linState is one key's state in the sequential model.
type linState struct {
	State  idem.State // 0: no record (never claimed, or released)
	Token  uint64     // the holder's token (in progress or completed)
	Result string     // once completed
	Last   uint64     // the highest token the key was ever given
}

// storeModel is the Store contract for one key with leases that never run out.
var storeModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[int][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(linInput).Key
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(byKey))
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return linState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		return linStep(s, in, out)
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%s -> %s", input.(linInput), output.(linOutput))
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(linState)) },
}

func linStep(s linState, in linInput, out linOutput) (bool, linState) {
	held := in.Token == s.Token && s.State != 0
	switch in.Op {
	case linClaim:
		switch s.State {
		case 0: // a fresh or released key: acquired, with a token above every earlier one
			if out.Outcome != idem.Acquired || out.Token <= s.Last {
				return false, s
			}
			return true, linState{State: idem.StateInProgress, Token: out.Token, Last: out.Token}
		case idem.StateInProgress:
			return out.Outcome == idem.InProgress, s
		default:
			return out.Outcome == idem.Replayed && out.Result == s.Result, s
		}
	case linComplete:
		switch {
		case !held:
			return out.Err == linLeaseLost, s
		case s.State == idem.StateInProgress:
			if out.Err != linOK {
				return false, s
			}
			s.State, s.Result = idem.StateCompleted, in.Result
			return true, s
		default: // completed twice by its holder: a no-op keeping the first result
			return out.Err == linOK, s
		}
	case linRelease:
		switch {
		case s.State == 0:
			return out.Err == linOK, s
		case !held:
			return out.Err == linLeaseLost, s
		case s.State == idem.StateCompleted:
			return out.Err == linCompleted, s
		default:
			if out.Err != linOK {
				return false, s
			}
			return true, linState{Last: s.Last}
		}
	default: // renew
		switch {
		case !held:
			return out.Err == linLeaseLost, s
		case s.State == idem.StateCompleted:
			return out.Err == linCompleted, s
		default:
			return out.Err == linOK, s
		}
	}
}

// violation describes the calls on the first key, in key order, whose history has no
// legal order: each call with its client, its logical call and return times and its
// answer, at most maxViolationCalls of them.
func violation(history []porcupine.Operation, keys []idem.Key, timeout time.Duration) string {
	parts := storeModel.Partition(history)
	slices.SortFunc(parts, func(a, b []porcupine.Operation) int {
		return a[0].Input.(linInput).Key - b[0].Input.(linInput).Key
	})
	for _, ops := range parts {
		if porcupine.CheckOperationsTimeout(storeModel, ops, timeout) != porcupine.Illegal {
			continue
		}
		slices.SortFunc(ops, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
		var b strings.Builder
		fmt.Fprintf(&b, "no legal order of these %d calls on key %v:", len(ops), keys[ops[0].Input.(linInput).Key])
		for i, op := range ops {
			if i == maxViolationCalls {
				fmt.Fprintf(&b, "\n  … and %d more", len(ops)-i)
				break
			}
			fmt.Fprintf(&b, "\n  client %2d [%d, %d] %s", op.ClientId, op.Call, op.Return,
				storeModel.DescribeOperation(op.Input, op.Output))
		}
		return b.String()
	}
	return "no single key's calls are illegal on their own (the checker and its per-key model disagree)"
}

// maxViolationCalls bounds the calls a violation lists.
const maxViolationCalls = 80
