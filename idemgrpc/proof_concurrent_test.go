package idemgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
)

// proofAwait blocks a handler until n of customer's arrivals are counted by
// counter. The timeout only ends a test that would hang.
func proofAwait(t *testing.T, counter *grpctest.Arrivals, customer string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := counter.Await(ctx, customer, n); err != nil {
		t.Errorf("%s: %d of %d arrivals after a minute: %v", customer, counter.Count(customer), n, err)
	}
}

// Hedging, as gRFC A6 describes it: grpc-go does not implement hedgingPolicy
// (see grpctest.Hedge for where its source says so), so grpctest.Hedge sends the
// copies, chained below the key interceptor as grpc-go's hedging would run
// below it: every copy carries the call's one key. Five copies sent at once
// reach a handler that waits until all five have reached the server, so they
// are all in flight together; each logical call takes effect once and is
// answered with that order. Then copies sent 1 ms apart (no waiting handler):
// once too.
func TestProofHedging(t *testing.T) {
	t.Parallel()
	proofForEach(t, proofBoth, func(t *testing.T, _ proofTarget, _ string, env *proofEnv) {
		arrivals := &grpctest.Arrivals{}
		orders := &grpctest.Orders{Before: func(_ context.Context, req *orderspb.PlaceOrderRequest) {
			if strings.HasPrefix(req.GetCustomer(), "together") {
				proofAwait(t, arrivals, req.GetCustomer(), 5)
			}
		}}
		addr := env.serve(t, idemgrpc.Config{RequireKey: true}, orders, arrivals.Interceptor())
		together := proofDial(t, addr, grpctest.NoRetryServiceConfig, proofKeys(t), grpctest.Hedge(5, 0))
		spaced := proofDial(t, addr, grpctest.NoRetryServiceConfig, proofKeys(t), grpctest.Hedge(3, time.Millisecond))
		for i := range 6 {
			c, client := fmt.Sprintf("together%d", i), together
			if i%2 == 1 {
				c, client = fmt.Sprintf("spaced%d", i), spaced
			}
			o, err := client.PlaceOrder(context.Background(), &orderspb.PlaceOrderRequest{Customer: c, Amount: 9})
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			proofPlacedOnce(t, env, orders, c, o)
			if n := arrivals.Count(c); i%2 == 0 && n < 5 {
				t.Fatalf("%s: %d copies reached the server, want 5", c, n)
			}
		}
	})
}

// Eight callers send the same key at once (set in the metadata by the caller),
// through grpc-go's retry policy: the call takes effect once and all eight get
// its order, seven of them as a replay. With Config.Wait the duplicates wait on
// the server for the first call's result; without it, each is answered
// Unavailable (ReasonKeyInProgress) while the first runs (the handler waits for
// seven such answers), and the retry policy brings it back after the pushback
// to get the result. In atomic mode the duplicates wait in the database (a row
// lock, SQLite's write lock) either way; the handler waits for all eight to
// arrive.
func TestProofConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	proofForEach(t, proofBoth, func(t *testing.T, tg proofTarget, _ string, env *proofEnv) {
		for _, wait := range []bool{true, false} {
			name, cfg := "retry", idemgrpc.Config{RequireKey: true}
			if wait {
				name, cfg.Wait = "wait", time.Minute
			}
			t.Run(name, func(t *testing.T) {
				const callers = 8
				arrivals, inProgress := &grpctest.Arrivals{}, &grpctest.Arrivals{}
				busy := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
					resp, err := h(ctx, req)
					if idemgrpc.Reason(err) == idemgrpc.ReasonKeyInProgress {
						inProgress.Add(req.(*orderspb.PlaceOrderRequest).GetCustomer())
					}
					return resp, err
				}
				orders := &grpctest.Orders{Before: func(_ context.Context, req *orderspb.PlaceOrderRequest) {
					if wait || tg.atomic {
						proofAwait(t, arrivals, req.GetCustomer(), callers)
					} else {
						proofAwait(t, inProgress, req.GetCustomer(), callers-1)
					}
				}}
				addr := env.serve(t, cfg, orders, arrivals.Interceptor(), busy)
				client := proofDial(t, addr, grpctest.RetryServiceConfig, proofKeys(t))
				c := "dup-" + name
				ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, idemkey.NewV7())
				type answer struct {
					o        *orderspb.Order
					replayed bool
					err      error
				}
				answers := make([]answer, callers)
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						var header metadata.MD
						o, err := client.PlaceOrder(ctx, &orderspb.PlaceOrderRequest{Customer: c, Amount: 4}, grpc.Header(&header))
						answers[i] = answer{o, idemgrpc.Replayed(header), err}
					})
				}
				wg.Wait()
				replays := 0
				for i, a := range answers {
					if a.err != nil {
						t.Fatalf("caller %d: %v", i, a.err)
					}
					proofPlacedOnce(t, env, orders, c, a.o)
					if a.replayed {
						replays++
					}
				}
				if replays != callers-1 {
					t.Fatalf("%d of %d callers were answered with a replay, want %d", replays, callers, callers-1)
				}
				if !wait && !tg.atomic && inProgress.Count(c) < callers-1 {
					t.Fatalf("%d in-progress answers, want %d", inProgress.Count(c), callers-1)
				}
			})
		}
	})
}
