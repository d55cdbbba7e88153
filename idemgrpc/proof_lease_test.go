package idemgrpc_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
	"github.com/idemhq/idem/internal/testsvc"
)

// proofRenewals is a store that counts the lease renewals that succeeded.
type proofRenewals struct {
	idem.Store
	renewer idem.Renewer
	n       atomic.Int64
}

func (s *proofRenewals) Renew(ctx context.Context, k idem.Key, token uint64, lease time.Duration) error {
	err := s.renewer.Renew(ctx, k, token, lease)
	if err == nil {
		s.n.Add(1)
	}
	return err
}

// A handler slower than the lease keeps its key: with a 1.5 s lease, the
// handler blocks until the store has renewed the lease twice and the first lease
// has run out; a duplicate sent then (without a retry policy, to see the answer)
// is told Unavailable, ReasonKeyInProgress, and the store still shows the key in
// progress; once the handler returns, the call has run once and the duplicate is
// answered with its order.
//
// Plain mode: the atomic interceptor's claim is held by its transaction and
// renews nothing (TestProofAtomicSlowerThanLease).
//
// The lease is not shorter because a renewal is given a third of it: with
// 300 ms, SQLite's renewals (an fsync each, synchronous=FULL) sometimes took
// over 100 ms on a loaded machine, and a lease lost that way is the store
// failing the heartbeat, not what this proves.
func TestProofSlowerThanLease(t *testing.T) {
	t.Parallel()
	const lease = 1500 * time.Millisecond
	proofForEach(t, proofPlainOnly, func(t *testing.T, _ proofTarget, _ string, env *proofEnv) {
		reached := make(chan time.Time, 1)
		release := make(chan struct{})
		var runs atomic.Int32
		orders := &grpctest.Orders{Before: func(context.Context, *orderspb.PlaceOrderRequest) {
			if runs.Add(1) == 1 { // only the first execution waits: a second one is the failure to see
				reached <- time.Now()
				<-release
			}
		}}
		renewals := &proofRenewals{Store: env.store, renewer: env.store.(idem.Renewer)}
		cfg := idemgrpc.Config{Store: renewals, RequireKey: true, Lease: lease}
		addr := env.serve(t, cfg, orders)
		client := proofDial(t, addr, grpctest.RetryServiceConfig, proofKeys(t))
		direct := proofDial(t, addr, grpctest.NoRetryServiceConfig)
		key := idemkey.NewV7()
		ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, key)
		req := &orderspb.PlaceOrderRequest{Customer: "slow", Amount: 8}
		type answer struct {
			o        *orderspb.Order
			replayed bool
			err      error
		}
		call := func(client orderspb.OrdersClient) <-chan answer {
			ch := make(chan answer, 1)
			go func() {
				var header metadata.MD
				o, err := client.PlaceOrder(ctx, req, grpc.Header(&header))
				ch <- answer{o, idemgrpc.Replayed(header), err}
			}()
			return ch
		}
		first := call(client)
		var at time.Time
		select {
		case at = <-reached:
		case a := <-first:
			t.Fatalf("the call returned before its handler ran: %v", a.err)
		}
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()

		testsvc.Eventually(t, time.Minute, "two renewals, and the first lease to run out", func() bool {
			return renewals.n.Load() >= 2 && time.Now().After(at.Add(lease))
		})
		if a := <-call(direct); status.Code(a.err) != codes.Unavailable || idemgrpc.Reason(a.err) != idemgrpc.ReasonKeyInProgress {
			t.Fatalf("a duplicate after %d renewals: %v (reason %q), want Unavailable, %s", renewals.n.Load(), a.err, idemgrpc.Reason(a.err), idemgrpc.ReasonKeyInProgress)
		}
		if insp, ok := env.store.(idem.Inspector); ok {
			// The scope of a call without credentials (CredentialScope).
			rec, err := insp.Inspect(context.Background(), idem.Key{Scope: "anonymous", ID: key})
			if err != nil || rec.State != idem.StateInProgress {
				t.Fatalf("the store holds %+v (%v), want the key in progress", rec, err)
			}
		}
		close(release)
		a := <-first
		if a.err != nil || a.replayed {
			t.Fatalf("first call: %v, replayed %v", a.err, a.replayed)
		}
		proofPlacedOnce(t, env, orders, "slow", a.o)
		d := <-call(direct)
		if d.err != nil || !d.replayed || d.o.GetOrderId() != a.o.GetOrderId() {
			t.Fatalf("duplicate after the call: %v, replayed %v, order %s; want the replay of %s", d.err, d.replayed, d.o.GetOrderId(), a.o.GetOrderId())
		}
		if n := orders.Executions(); n != 1 {
			t.Fatalf("the handler ran %d times", n)
		}
	})
}

// An atomic handler slower than Config.Lease commits, as a plain one keeps its
// key by renewing (TestProofSlowerThanLease): its claim is held by the open
// transaction, invisible to every other call, and nothing renews it, so the
// interceptor claims it for as long as a result is kept; with a claim of
// Config.Lease, CompleteTx refused the result (idem.ErrLeaseLost) on every
// attempt, each rolled back and answered Unavailable (IDEMPOTENCY_NOT_COMMITTED),
// and the call never completed. Every execution here outlasts the lease.
func TestProofAtomicSlowerThanLease(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	proofForEach(t, proofAtomicOnly, func(t *testing.T, _ proofTarget, _ string, env *proofEnv) {
		orders := &grpctest.Orders{Before: func(context.Context, *orderspb.PlaceOrderRequest) {
			// Slower than the lease: what the scenario is, not a timing assertion.
			start := time.Now()
			testsvc.Eventually(t, time.Minute, "the lease to run out", func() bool { return time.Since(start) > 2*lease })
		}}
		addr := env.serve(t, idemgrpc.Config{RequireKey: true, Lease: lease}, orders)
		client := proofDial(t, addr, grpctest.RetryServiceConfig, proofKeys(t))
		o, err := client.PlaceOrder(context.Background(), &orderspb.PlaceOrderRequest{Customer: "slow-atomic", Amount: 2})
		if err != nil {
			t.Fatalf("%v (reason %q) after %d executions", err, idemgrpc.Reason(err), orders.Executions())
		}
		proofPlacedOnce(t, env, orders, "slow-atomic", o)
		if n := orders.Executions(); n != 1 {
			t.Fatalf("the handler ran %d times", n)
		}
	})
}

// The same key with another request (another amount) is FailedPrecondition,
// ReasonKeyReused, with a message that names the key, and does not run.
func TestProofKeyReused(t *testing.T) {
	t.Parallel()
	proofForEach(t, proofBoth, func(t *testing.T, _ proofTarget, _ string, env *proofEnv) {
		orders := &grpctest.Orders{}
		addr := env.serve(t, idemgrpc.Config{RequireKey: true}, orders)
		client := proofDial(t, addr, grpctest.RetryServiceConfig, proofKeys(t))
		key := idemkey.NewV7()
		ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, key)
		o, err := client.PlaceOrder(ctx, &orderspb.PlaceOrderRequest{Customer: "reused", Amount: 5})
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.PlaceOrder(ctx, &orderspb.PlaceOrderRequest{Customer: "reused", Amount: 6})
		if status.Code(err) != codes.FailedPrecondition || idemgrpc.Reason(err) != idemgrpc.ReasonKeyReused {
			t.Fatalf("another request with the key: %v (reason %q), want FailedPrecondition, %s", err, idemgrpc.Reason(err), idemgrpc.ReasonKeyReused)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, key) {
			t.Fatalf("the message does not name the key %s: %s", key, msg)
		}
		proofPlacedOnce(t, env, orders, "reused", o)
		if n := orders.Executions(); n != 1 {
			t.Fatalf("the handler ran %d times", n)
		}
	})
}
