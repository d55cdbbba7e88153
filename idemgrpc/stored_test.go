package idemgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
)

// An error status is stored with its details and replayed equal.
func TestErrorStatusReplayed(t *testing.T) {
	t.Parallel()
	st, err := status.New(codes.FailedPrecondition, "credit limit reached").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "amount", Description: "over the limit"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	orders := &grpctest.Orders{Effect: func(context.Context, *orderspb.PlaceOrderRequest, *orderspb.Order) error { return st.Err() }}
	r := newRig(t, idemgrpc.Config{}, rigOpts{orders: orders})
	key := idemkey.NewV7()
	first := r.place(context.Background(), key, "c", 5)
	again := r.place(context.Background(), key, "c", 5)
	for i, c := range []call{first, again} {
		if got := status.Convert(c.err); !proto.Equal(got.Proto(), st.Proto()) {
			t.Fatalf("call %d: %v, want %v", i, got.Proto(), st.Proto())
		}
	}
	if idemgrpc.Replayed(first.header) || !idemgrpc.Replayed(again.header) {
		t.Fatalf("headers %v, %v: want only the second replayed", first.header, again.header)
	}
	if n := orders.Executions(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}

// The headers and trailers the handler set (SetHeader, SendHeader, SetTrailer)
// reach the first caller and are replayed; only the replay says it is one.
func TestHeadersAndTrailersReplayed(t *testing.T) {
	t.Parallel()
	orders := &grpctest.Orders{Before: func(ctx context.Context, _ *orderspb.PlaceOrderRequest) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-set", "a", "x-multi", "1"))
		_ = grpc.SendHeader(ctx, metadata.Pairs("x-sent", "b", "x-multi", "2"))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "c"))
	}}
	r := newRig(t, idemgrpc.Config{}, rigOpts{orders: orders})
	key := idemkey.NewV7()
	first := r.place(context.Background(), key, "c", 5)
	again := r.place(context.Background(), key, "c", 5)
	for i, c := range []call{first, again} {
		if c.err != nil {
			t.Fatalf("call %d: %v", i, c.err)
		}
		h, tr := c.header, c.trailer
		if got := fmt.Sprint(h.Get("x-set"), h.Get("x-sent"), h.Get("x-multi"), tr.Get("x-trailer")); got != "[a] [b] [1 2] [c]" {
			t.Fatalf("call %d: header %v, trailer %v", i, h, tr)
		}
	}
	if idemgrpc.Replayed(first.header) || !idemgrpc.Replayed(again.header) || !proto.Equal(first.order, again.order) {
		t.Fatalf("first %v %v, again %v %v", first.order, first.header, again.order, again.header)
	}
}

// failOnce is an Orders.Effect that fails the first execution of each customer
// with err, then lets it succeed.
func failOnce(err func() error) func(context.Context, *orderspb.PlaceOrderRequest, *orderspb.Order) error {
	var mu sync.Mutex
	failed := map[string]bool{}
	return func(_ context.Context, req *orderspb.PlaceOrderRequest, _ *orderspb.Order) error {
		mu.Lock()
		defer mu.Unlock()
		if failed[req.GetCustomer()] {
			return nil
		}
		failed[req.GetCustomer()] = true
		return err()
	}
}

// A code that asks for a retry gives the key back, and so does a server error
// with StoreServerErrors false: the retry runs the handler again. A server error
// is stored by default: the retry sees the same failure.
func TestWhichCodesAreStored(t *testing.T) {
	t.Parallel()
	no := false
	tests := []struct {
		code   codes.Code
		cfg    idemgrpc.Config
		stored bool
	}{
		{codes.Unavailable, idemgrpc.Config{}, false},
		{codes.Aborted, idemgrpc.Config{}, false},
		{codes.ResourceExhausted, idemgrpc.Config{}, false},
		{codes.DeadlineExceeded, idemgrpc.Config{}, false},
		{codes.Canceled, idemgrpc.Config{}, false},
		{codes.Internal, idemgrpc.Config{}, true},
		{codes.Unknown, idemgrpc.Config{}, true},
		{codes.DataLoss, idemgrpc.Config{}, true},
		{codes.Unimplemented, idemgrpc.Config{}, true},
		{codes.Internal, idemgrpc.Config{StoreServerErrors: &no}, false},
		{codes.Unknown, idemgrpc.Config{StoreServerErrors: &no}, false},
		{codes.NotFound, idemgrpc.Config{StoreServerErrors: &no}, true},
		{codes.PermissionDenied, idemgrpc.Config{}, true},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%v stored=%v", tt.code, tt.stored)
		if tt.cfg.StoreServerErrors != nil {
			name += " StoreServerErrors=false"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			orders := &grpctest.Orders{Effect: failOnce(func() error { return status.Error(tt.code, "first execution fails") })}
			r := newRig(t, tt.cfg, rigOpts{orders: orders})
			key := idemkey.NewV7()
			if c := r.place(context.Background(), key, "c", 5); status.Code(c.err) != tt.code {
				t.Fatalf("first call: %v", c.err)
			}
			again := r.place(context.Background(), key, "c", 5)
			switch {
			case tt.stored && (status.Code(again.err) != tt.code || !idemgrpc.Replayed(again.header) || orders.Executions() != 1):
				t.Fatalf("retry: %v, header %v, %d executions: want the stored %v", again.err, again.header, orders.Executions(), tt.code)
			case !tt.stored && (again.err != nil || idemgrpc.Replayed(again.header) || orders.Executions() != 2):
				t.Fatalf("retry: %v, header %v, %d executions: want a second execution", again.err, again.header, orders.Executions())
			}
		})
	}
}

// A handler that panics gives its key back: the retry runs, it does not wait
// out the lease. The panic goes on to the recovery interceptor outside.
func TestPanicReleasesKey(t *testing.T) {
	t.Parallel()
	recovery := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Errorf(codes.Internal, "recovered: %v", p)
			}
		}()
		return h(ctx, req)
	}
	orders := &grpctest.Orders{Effect: failOnce(func() error { panic("handler bug") })}
	r := newRig(t, idemgrpc.Config{}, rigOpts{orders: orders, outer: []grpc.UnaryServerInterceptor{recovery}})
	key := idemkey.NewV7()
	if c := r.place(context.Background(), key, "c", 5); status.Code(c.err) != codes.Internal || !strings.Contains(c.err.Error(), "handler bug") {
		t.Fatalf("first call: %v", c.err)
	}
	again := r.place(context.Background(), key, "c", 5)
	if again.err != nil || idemgrpc.Replayed(again.header) || orders.Executions() != 2 {
		t.Fatalf("retry: %v, header %v, %d executions: want a second execution", again.err, again.header, orders.Executions())
	}
	if third := r.place(context.Background(), key, "c", 5); !idemgrpc.Replayed(third.header) || !proto.Equal(third.order, again.order) {
		t.Fatalf("third call: %v %v: want the replay of the second", third.order, third.err)
	}
}

// A new interceptor, one that has never run the method (another process, after a
// restart), replays a stored response: it resolves the type from the registry.
func TestReplayInFreshProcess(t *testing.T) {
	t.Parallel()
	store := newMem(t)
	first := newRig(t, idemgrpc.Config{Store: store}, rigOpts{})
	key := idemkey.NewV7()
	want := first.place(context.Background(), key, "c", 5)
	if want.err != nil {
		t.Fatal(want.err)
	}
	for _, tt := range []struct {
		name string
		cfg  idemgrpc.Config
	}{
		{"GlobalTypes", idemgrpc.Config{Store: store}},
		// No registered type: a dynamic message of the descriptor's output.
		{"dynamic", idemgrpc.Config{Store: store, Types: new(protoregistry.Types)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fresh := newRig(t, tt.cfg, rigOpts{})
			got := fresh.place(context.Background(), key, "c", 5)
			if got.err != nil || !proto.Equal(got.order, want.order) || !idemgrpc.Replayed(got.header) {
				t.Fatalf("got %v %v (header %v), want the replay of %v", got.order, got.err, got.header, want.order)
			}
			if n := fresh.orders.Executions(); n != 0 {
				t.Fatalf("the handler ran %d times", n)
			}
		})
	}
	t.Run("method not in Config.Files", func(t *testing.T) {
		fresh := newRig(t, idemgrpc.Config{Store: store, Files: new(protoregistry.Files)}, rigOpts{})
		got := fresh.place(context.Background(), key, "c", 5)
		st := wantStatus(t, got.err, codes.Internal, idemgrpc.ReasonCorruptRecord)
		if !strings.Contains(st.Message(), "Config.Files") {
			t.Fatalf("message %q: want it to name Config.Files", st.Message())
		}
		if n := fresh.orders.Executions(); n != 0 {
			t.Fatalf("the handler ran %d times", n)
		}
	})
}
