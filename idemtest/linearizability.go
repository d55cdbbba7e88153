package idemtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemhq/idem"
)

// LinearizabilityOptions sizes a history for CheckLinearizability. Zero fields take
// the defaults in brackets.
type LinearizabilityOptions struct {
	Keys    int    // keys the clients share at a time [4]
	Clients int    // concurrent goroutines [8]
	Ops     int    // calls per client [60]
	Seed    uint64 // seed of the clients' random choices [from the clock]
	// Timeout bounds the checker's search [20s]. A search that runs out reports
	// LinearizabilityUnknown, never a pass.
	Timeout time.Duration
}

// LinearizabilityResult is the verdict of CheckLinearizability.
type LinearizabilityResult int

const (
	Linearizable           LinearizabilityResult = iota // some order of the calls obeys the contract
	NotLinearizable                                     // no order does: the store broke the contract
	LinearizabilityUnknown                              // the checker ran out of time
)

func (r LinearizabilityResult) String() string {
	switch r {
	case Linearizable:
		return "linearizable"
	case NotLinearizable:
		return "not linearizable"
	}
	return "unknown (checker timed out)"
}

// LinearizabilityReport describes one checked history.
type LinearizabilityReport struct {
	Result LinearizabilityResult
	Seed   uint64
	Calls  int
	// Acquired, Replayed, InProgress, LeaseLost and Completed count answers, to show
	// that the history exercised the contract rather than one path of it.
	Acquired, Replayed, InProgress, LeaseLost, Completed int
}

func (r LinearizabilityReport) String() string {
	return fmt.Sprintf("%s: %d calls (seed %d): %d acquired, %d replayed, %d in progress, %d ErrLeaseLost, %d ErrCompleted",
		r.Result, r.Calls, r.Seed, r.Acquired, r.Replayed, r.InProgress, r.LeaseLost, r.Completed)
}

// CheckLinearizability runs random concurrent Claim, Complete, Release and Renew
// calls (Renew when s is an idem.Renewer) on a few fresh keys from many goroutines,
// records when each call started and returned, and asks the porcupine model checker
// whether some sequential order of the calls, consistent with real time, obeys the
// Store contract as modelled by storeModel: claim outcomes, per-key tokens strictly
// rising, ErrLeaseLost and ErrCompleted where due, the first result replayed.
//
// Time is not modelled. Every lease and retention is an hour, so nothing expires
// during a run (a few seconds); expiry and takeover are covered by StoreSuite's own
// cases. The model therefore says exactly one thing may happen for each call in each
// state, which keeps the search small.
//
// The error is for a store failure (anything but ErrLeaseLost and ErrCompleted).
func CheckLinearizability(ctx context.Context, s idem.Store, keyPrefix string, o LinearizabilityOptions) (LinearizabilityReport, error) {
	o = o.withDefaults()
	renewer, _ := s.(idem.Renewer)
	// The clients move on to fresh keys every linGeneration calls: a completed key
	// only replays, so a history on fixed keys would soon exercise nothing else.
	keys := make([]idem.Key, o.Keys*(o.Ops/linGeneration+1))
	for i := range keys {
		keys[i] = idem.Key{Scope: "lin", ID: fmt.Sprintf("%s/%d", keyPrefix, i)}
	}
	var (
		clock   atomic.Int64
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
	)
	errs := make(chan error, o.Clients)
	for client := range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &linClient{rng: rand.New(rand.NewPCG(o.Seed, uint64(client))), held: map[int]uint64{}}
			for n := range o.Ops {
				in := c.next(n/linGeneration*o.Keys, o.Keys, renewer != nil, fmt.Sprintf("r%d-%d", client, n))
				call := clock.Add(1)
				out, err := apply(ctx, s, renewer, keys[in.Key], in)
				ret := clock.Add(1)
				if err != nil {
					errs <- fmt.Errorf("%s on key %v: %w", in, keys[in.Key], err)
					return
				}
				c.observe(in, out)
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	rep := LinearizabilityReport{Seed: o.Seed, Calls: len(history)}
	if err := errors.Join(collect(errs)...); err != nil {
		return rep, err
	}
	for _, op := range history {
		out := op.Output.(linOutput)
		switch {
		case out.Err == linLeaseLost:
			rep.LeaseLost++
		case out.Err == linCompleted:
			rep.Completed++
		case op.Input.(linInput).Op == linClaim && out.Outcome == idem.Acquired:
			rep.Acquired++
		case op.Input.(linInput).Op == linClaim && out.Outcome == idem.Replayed:
			rep.Replayed++
		case op.Input.(linInput).Op == linClaim && out.Outcome == idem.InProgress:
			rep.InProgress++
		}
	}
	switch porcupine.CheckOperationsTimeout(storeModel, history, o.Timeout) {
	case porcupine.Ok:
		rep.Result = Linearizable
	case porcupine.Illegal:
		rep.Result = NotLinearizable
	default:
		rep.Result = LinearizabilityUnknown
	}
	return rep, nil
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

func (o LinearizabilityOptions) withDefaults() LinearizabilityOptions {
	if o.Keys <= 0 {
		o.Keys = 4
	}
	if o.Clients <= 0 {
		o.Clients = 8
	}
	if o.Ops <= 0 {
		o.Ops = 60
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.Timeout <= 0 {
		o.Timeout = 20 * time.Second
	}
	return o
}

// testLinearizable is StoreSuite's case: one history per store, failing on a
// violation and on a checker that ran out of time (which would prove nothing).
func testLinearizable(t *testing.T, s idem.Store) {
	rep, err := CheckLinearizability(ctxFor(t), s, t.Name(), LinearizabilityOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if rep.Result != Linearizable {
		t.Fatalf("history %s; rerun with LinearizabilityOptions{Seed: %d} to replay the clients' choices", rep, rep.Seed)
	}
}

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

// linClient chooses calls: mostly with the tokens it holds, sometimes with one it
// held before (a stale holder), so that fencing is exercised.
type linClient struct {
	rng   *rand.Rand
	held  map[int]uint64 // key → the token this client last acquired
	stale []uint64
}

// linGeneration is how many calls a client makes on one generation of keys.
const linGeneration = 15

func (c *linClient) next(first, keys int, renew bool, result string) linInput {
	k := first + c.rng.IntN(keys)
	tok, holds := c.held[k]
	if !holds || c.rng.IntN(8) == 0 {
		switch {
		case len(c.stale) > 0 && c.rng.IntN(3) > 0:
			tok = c.stale[c.rng.IntN(len(c.stale))]
		case !holds:
			return linInput{Op: linClaim, Key: k}
		}
	}
	if !holds && c.rng.IntN(2) == 0 {
		return linInput{Op: linClaim, Key: k}
	}
	switch p := c.rng.IntN(10); {
	case p < 3 && renew:
		return linInput{Op: linRenew, Key: k, Token: tok}
	case p < 6:
		return linInput{Op: linRelease, Key: k, Token: tok}
	case p < 8:
		return linInput{Op: linComplete, Key: k, Token: tok, Result: result}
	}
	return linInput{Op: linClaim, Key: k}
}

func (c *linClient) observe(in linInput, out linOutput) {
	if in.Op == linClaim && out.Outcome == idem.Acquired {
		if old, ok := c.held[in.Key]; ok {
			c.stale = append(c.stale, old)
		}
		c.held[in.Key] = out.Token
		return
	}
	if in.Op != linClaim && in.Token == c.held[in.Key] && (in.Op != linRenew || out.Err != linOK) {
		// Released, completed or lost: this client's token for the key is spent.
		c.stale = append(c.stale, in.Token)
		delete(c.held, in.Key)
	}
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
		return fmt.Sprintf("%s -> %+v", input.(linInput), output.(linOutput))
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
