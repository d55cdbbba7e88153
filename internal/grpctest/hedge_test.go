package grpctest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/internal/orderspb"
)

// hedgeInvoker answers copy n (from 1) with answer(ctx, n, reply, trailer).
func hedgeInvoker(answer func(ctx context.Context, n int64, reply *orderspb.Order, trailer *metadata.MD) error) (grpc.UnaryInvoker, *atomic.Int64) {
	var sent atomic.Int64
	return func(ctx context.Context, _ string, _, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		n := sent.Add(1)
		trailer := new(metadata.MD)
		for _, o := range opts {
			if t, ok := o.(grpc.TrailerCallOption); ok {
				trailer = t.TrailerAddr
			}
		}
		return answer(ctx, n, reply.(*orderspb.Order), trailer)
	}, &sent
}

func TestHedge(t *testing.T) {
	t.Parallel()
	unavailable := status.Error(codes.Unavailable, "busy")
	cases := []struct {
		name     string
		copies   int
		delay    time.Duration
		answer   func(ctx context.Context, n int64, reply *orderspb.Order, trailer *metadata.MD) error
		wantCode codes.Code
		wantID   string
		wantSent int64
	}{
		{"the first OK wins, the others are cancelled", 3, 0, func(ctx context.Context, n int64, r *orderspb.Order, _ *metadata.MD) error {
			switch n {
			case 1:
				return unavailable
			case 2:
				<-ctx.Done() // answered only once cancelled
				return status.FromContextError(ctx.Err()).Err()
			}
			r.OrderId = "won"
			return nil
		}, codes.OK, "won", 3},
		{"a fatal status wins", 3, 0, func(ctx context.Context, n int64, _ *orderspb.Order, _ *metadata.MD) error {
			if n == 3 { // the last copy sent, so that all three are counted
				return status.Error(codes.InvalidArgument, "bad")
			}
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}, codes.InvalidArgument, "", 3},
		{"every copy non-fatal: the last status", 4, 0, func(context.Context, int64, *orderspb.Order, *metadata.MD) error {
			return unavailable
		}, codes.Unavailable, "", 4},
		{"a non-fatal status sends the next copy at once, not after the delay", 2, time.Hour, func(_ context.Context, n int64, r *orderspb.Order, _ *metadata.MD) error {
			if n == 1 {
				return unavailable
			}
			r.OrderId = "second"
			return nil
		}, codes.OK, "second", 2},
		{"a negative pushback sends no more copies", 5, time.Hour, func(_ context.Context, _ int64, _ *orderspb.Order, trailer *metadata.MD) error {
			*trailer = metadata.Pairs("grpc-retry-pushback-ms", "-1")
			return unavailable
		}, codes.Unavailable, "", 1},
		{"one copy is a plain call", 1, 0, func(_ context.Context, _ int64, r *orderspb.Order, _ *metadata.MD) error {
			r.OrderId = "only"
			return nil
		}, codes.OK, "only", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			invoker, sent := hedgeInvoker(c.answer)
			reply := &orderspb.Order{}
			// The timeout only ends a case that would hang: a broken Hedge waiting
			// for copies that wait for it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := Hedge(c.copies, c.delay)(ctx, "/idem.orders.v1.Orders/PlaceOrder", &orderspb.PlaceOrderRequest{}, reply, nil, invoker)
			if status.Code(err) != c.wantCode || reply.GetOrderId() != c.wantID {
				t.Fatalf("got %v and order %q, want %v and %q", err, reply.GetOrderId(), c.wantCode, c.wantID)
			}
			if n := sent.Load(); n != c.wantSent {
				t.Fatalf("%d copies sent, want %d", n, c.wantSent)
			}
		})
	}
}
