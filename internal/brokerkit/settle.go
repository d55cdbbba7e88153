// Package brokerkit holds what idem's broker adapters (idemnats, idemkafka,
// idemredis, idemamqp, idempubsub, idemsqs) share: the settle-once guard of a
// delivery (Once), the pull pump that fetches batches for Receive (Pump), the
// lease keeper that extends the ack deadline of unsettled deliveries (Keeper),
// and the shapes every adapter's ends take: the constructor's prologue (Setup,
// Configure), Close's once (CloseOnce), the interfaces each end implements
// (Source, Sink).
//
// It is internal: the contract a third-party adapter owes is idem's (Settler,
// ErrSettled, Features) and idemtest.BrokerSuite checks it; these helpers are how
// idem's own adapters meet it, and their shapes may still change.
package brokerkit

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/idemhq/idem"
)

// Once is the settle-once guard of one delivery: its first Ack or Nak goes to the
// broker, and any later one returns idem.ErrSettled without touching it. A settle
// that failed hands the guard back (Undo), since the delivery was not settled and
// the caller may try again. The zero value is ready; it costs one atomic word.
type Once struct{ taken atomic.Bool }

// Begin claims the delivery's settle: true for the first caller and, until an
// Undo, false for every other, which returns Settled(...).
func (o *Once) Begin() bool { return o.taken.CompareAndSwap(false, true) }

// Undo gives the settle back after it failed, so that it can be tried again.
func (o *Once) Undo() { o.taken.Store(false) }

// Claim is the prologue of a settle that heeds ctx first: ctx's error if it ended,
// Settled(pkg, op, position) if the settle was taken, else nil, the settle claimed
// (Undo it if the settle fails).
func (o *Once) Claim(ctx context.Context, pkg, op, position string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !o.Begin() {
		return Settled(pkg, op, position)
	}
	return nil
}

// Taken reports whether a settle was made or is on its way.
func (o *Once) Taken() bool { return o.taken.Load() }

// Settled is the error of a second settle: pkg, op and position ("idemamqp", "ack",
// "queue q delivery tag 3") say which settle it was. It matches idem.ErrSettled and,
// since settling twice is the caller's mistake, idem.ErrInvalid (it holds an
// *idem.InputError, for errors.As).
func Settled(pkg, op, position string) error {
	return settledError{&idem.InputError{Field: "Delivery", Reason: fmt.Sprintf("at %s: %s %s after it was settled", position, pkg, op),
		Fix: "settle each delivery once: Ack after its effect committed, or Nak"}}
}

// settledError is an *idem.InputError that also matches idem.ErrSettled.
type settledError struct{ in *idem.InputError }

func (e settledError) Error() string   { return e.in.Error() }
func (e settledError) Unwrap() []error { return []error{idem.ErrSettled, e.in} }

// CheckReceive refuses a Receive's max below 1 (CheckMax), then a ctx that ended.
func CheckReceive(ctx context.Context, max int) error {
	if err := CheckMax(max); err != nil {
		return err
	}
	return ctx.Err()
}

// CheckMax refuses a Receive's max below 1, the same way on every adapter.
func CheckMax(max int) error {
	if max < 1 {
		return &idem.InputError{Field: "max", Reason: fmt.Sprintf("is below 1 (got %d)", max), Fix: "ask for at least one delivery"}
	}
	return nil
}
