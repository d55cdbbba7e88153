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
	Keys    int    // keys the clients share in one round [24]
	Clients int    // concurrent goroutines [32]
	Ops     int    // calls per client per round [16]
	Rounds  int    // rounds [10]
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
	// Violation, when Result is NotLinearizable, lists the calls on one key that
	// have no legal order, in the order they were made.
	Violation string
}

func (r LinearizabilityReport) String() string {
	s := fmt.Sprintf("%s: %d calls (seed %d): %d acquired, %d replayed, %d in progress, %d ErrLeaseLost, %d ErrCompleted",
		r.Result, r.Calls, r.Seed, r.Acquired, r.Replayed, r.InProgress, r.LeaseLost, r.Completed)
	if r.Violation != "" {
		s += "\n" + r.Violation
	}
	return s
}

// CheckLinearizability runs random concurrent Claim, Complete, Release and Renew
// calls (Renew when s is an idem.Renewer) from many goroutines, records when each
// call started and returned, and asks the porcupine model checker whether some
// sequential order of the calls, consistent with real time, obeys the Store
// contract as modelled by storeModel: claim outcomes, per-key tokens strictly
// rising, ErrLeaseLost and ErrCompleted where due, the first result replayed.
//
// The calls run in rounds; every client finishes its calls of a round before the
// next round starts. Each round's keys are half those of the round before (with
// whatever records and tokens the clients left on them: completed, released, held)
// and half fresh, so a key lives two rounds, its history stays short (the checker's
// cost grows steeply with the calls on one key) and the history as a whole is long.
// Clients keep their tokens across rounds and share them (see linClient), so the
// live token of a key is used by several clients at once. "Time" in the history is
// a counter every call and return steps, not a clock: nothing depends on how fast
// the machine or the store is.
//
// Time is not modelled. Every lease and retention is an hour, so nothing expires
// during a run; expiry and takeover are covered by StoreSuite's own cases. The
// model therefore says exactly one thing may happen for each call in each state,
// which keeps the search small.
//
// The error is for a store failure (anything but ErrLeaseLost and ErrCompleted).
func CheckLinearizability(ctx context.Context, s idem.Store, keyPrefix string, o LinearizabilityOptions) (LinearizabilityReport, error) {
	o = o.withDefaults()
	r := &linRun{s: s, o: o, step: (o.Keys + 1) / 2}
	r.renewer, _ = s.(idem.Renewer)
	r.keys = make([]idem.Key, r.step*(o.Rounds-1)+o.Keys)
	for i := range r.keys {
		r.keys[i] = idem.Key{Scope: "lin", ID: fmt.Sprintf("%s/%d", keyPrefix, i)}
	}
	board := make([]atomic.Uint64, len(r.keys))
	clients := make([]*linClient, o.Clients)
	for i := range clients {
		clients[i] = &linClient{rng: rand.New(rand.NewPCG(o.Seed, uint64(i))), board: board, held: map[int]uint64{}}
	}
	rep := LinearizabilityReport{Seed: o.Seed}
	for round := range o.Rounds {
		if err := r.round(ctx, clients, round*r.step); err != nil {
			rep.Calls = len(r.history)
			return rep, err
		}
	}
	rep.Calls = len(r.history)
	rep.count(r.history)
	switch porcupine.CheckOperationsTimeout(storeModel, r.history, o.Timeout) {
	case porcupine.Ok:
		rep.Result = Linearizable
	case porcupine.Illegal:
		rep.Result = NotLinearizable
		rep.Violation = violation(r.history, r.keys, o.Timeout)
	default:
		rep.Result = LinearizabilityUnknown
	}
	return rep, nil
}

// linRun is one CheckLinearizability: the store, the keys and the history so far.
type linRun struct {
	s       idem.Store
	renewer idem.Renewer
	o       LinearizabilityOptions
	keys    []idem.Key
	step    int // how far each round's keys move on from the round before

	clock   atomic.Int64
	mu      sync.Mutex
	history []porcupine.Operation
}

// round runs every client's calls of one round on the keys from first on, and waits
// for them all.
func (r *linRun) round(ctx context.Context, clients []*linClient, first int) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(clients))
	for id, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range r.o.Ops {
				in := c.next(first, r.o.Keys, r.renewer != nil, fmt.Sprintf("r%d-%d-%d", id, first, n))
				call := r.clock.Add(1)
				out, err := apply(ctx, r.s, r.renewer, r.keys[in.Key], in)
				ret := r.clock.Add(1)
				if err != nil {
					errs <- fmt.Errorf("%s on key %v: %w", in, r.keys[in.Key], err)
					return
				}
				c.observe(in, out)
				r.mu.Lock()
				r.history = append(r.history, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
				r.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// count fills in the report's tally of answers.
func (rep *LinearizabilityReport) count(history []porcupine.Operation) {
	for _, op := range history {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		switch {
		case out.Err == linLeaseLost:
			rep.LeaseLost++
		case out.Err == linCompleted:
			rep.Completed++
		case in.Op == linClaim && out.Outcome == idem.Acquired:
			rep.Acquired++
		case in.Op == linClaim && out.Outcome == idem.Replayed:
			rep.Replayed++
		case in.Op == linClaim && out.Outcome == idem.InProgress:
			rep.InProgress++
		}
	}
}

func (o LinearizabilityOptions) withDefaults() LinearizabilityOptions {
	if o.Keys <= 0 {
		o.Keys = 24
	}
	if o.Clients <= 0 {
		o.Clients = 32
	}
	if o.Ops <= 0 {
		o.Ops = 16
	}
	if o.Rounds <= 0 {
		o.Rounds = 10
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
	if rep.Result != Linearizable {
		t.Fatalf("history %s\nrerun with LinearizabilityOptions{Seed: %d} to replay the clients' choices", rep, rep.Seed)
	}
	t.Log(rep)
}
