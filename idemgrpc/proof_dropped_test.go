package idemgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
)

// proofDropper serves orders behind drop (outermost) and env's interceptor of
// cfg, and returns the address of a proxy in front of it, whose connections drop
// cuts to lose a response.
func proofDropper(t *testing.T, env *proofEnv, cfg idemgrpc.Config, orders *grpctest.Orders, drop *grpctest.Dropper, outer ...grpc.UnaryServerInterceptor) string {
	t.Helper()
	addr := env.serve(t, cfg, orders, append([]grpc.UnaryServerInterceptor{drop.Interceptor()}, outer...)...)
	proxy := proofMust(chaos.NewProxy("grpc", addr))(t)
	t.Cleanup(proxy.Close)
	drop.SetProxy(proxy)
	t.Cleanup(func() {
		if err := drop.Err(); err != nil {
			t.Error(err)
		}
	})
	return proxy.Addr()
}

// Responses lost on the wire after the handler ran (the first attempt of every
// other call) are retried by grpc-go's retry policy with the same key, and the
// retry is answered with the stored response: each of 30 calls takes effect once,
// every caller gets the order its first execution placed, and exactly the
// callers whose first response was lost see idempotent-replayed: true.
func TestProofDroppedResponses(t *testing.T) {
	t.Parallel()
	proofForEach(t, proofBoth, func(t *testing.T, _ proofTarget, _ string, env *proofEnv) {
		orders := &grpctest.Orders{}
		drop := &grpctest.Dropper{Drop: func(c string) bool { return strings.HasSuffix(c, "-lost") }}
		addr := proofDropper(t, env, idemgrpc.Config{RequireKey: true}, orders, drop)
		client := proofDial(t, addr, grpctest.RetryServiceConfig, proofKeys(t))
		for i := range 30 {
			c := fmt.Sprintf("c%02d", i)
			if i%2 == 0 {
				c += "-lost"
			}
			var header metadata.MD
			o, err := client.PlaceOrder(proofCall(t), &orderspb.PlaceOrderRequest{Customer: c, Amount: int64(i + 1)}, grpc.Header(&header))
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			proofPlacedOnce(t, env, orders, c, o)
			if lost := drop.Dropped(c); lost != (i%2 == 0) || idemgrpc.Replayed(header) != lost {
				t.Fatalf("%s: response lost %v, answered replayed %v: want both %v", c, lost, idemgrpc.Replayed(header), i%2 == 0)
			}
		}
	})
}

// AIP-155: the key travels in the request's request_id (Config.RequestField on
// the server, ClientConfig.RequestField on the client). Lost responses still
// take effect once, whether the client interceptor set the field (and the
// metadata) or the caller sent the key in the field alone; a request whose field
// and metadata carry different keys is InvalidArgument and does not run.
func TestProofRequestField(t *testing.T) {
	t.Parallel()
	proofForEach(t, proofBoth, func(t *testing.T, _ proofTarget, _ string, env *proofEnv) {
		orders := &grpctest.Orders{}
		drop := &grpctest.Dropper{Drop: func(string) bool { return true }}
		var fieldKeys sync.Map // customer → the request_id the server saw first
		seen := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if r, ok := req.(*orderspb.PlaceOrderRequest); ok {
				fieldKeys.LoadOrStore(r.GetCustomer(), r.GetRequestId())
			}
			return h(ctx, req)
		}
		addr := proofDropper(t, env, idemgrpc.Config{RequireKey: true, RequestField: "request_id"}, orders, drop, seen)
		keyed := proofDial(t, addr, grpctest.RetryServiceConfig,
			proofMust(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{RequestField: "request_id"}))(t))
		plain := proofDial(t, addr, grpctest.RetryServiceConfig) // the caller sets request_id itself
		for i := range 10 {
			c := fmt.Sprintf("aip%02d", i)
			req := &orderspb.PlaceOrderRequest{Customer: c, Amount: 3}
			client, want := keyed, ""
			if i%2 == 1 {
				client, want = plain, idemkey.NewV7()
				req.RequestId = want
			}
			var header metadata.MD
			o, err := client.PlaceOrder(proofCall(t), req, grpc.Header(&header))
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			proofPlacedOnce(t, env, orders, c, o)
			if !drop.Dropped(c) || !idemgrpc.Replayed(header) {
				t.Fatalf("%s: response lost %v, replayed %v: want both", c, drop.Dropped(c), idemgrpc.Replayed(header))
			}
			if got, _ := fieldKeys.Load(c); got == "" || got == nil || (want != "" && got != want) {
				t.Fatalf("%s: the server saw request_id %q, want %q (or any key, from the client interceptor)", c, got, want)
			}
			if req.GetRequestId() != want {
				t.Fatalf("%s: the client interceptor changed the caller's request (request_id %q)", c, req.GetRequestId())
			}
		}

		// Different keys in the field and the metadata: the server refuses it
		// (sent past the client interceptor, which refuses it too).
		ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, idemkey.NewV7())
		req := &orderspb.PlaceOrderRequest{Customer: "two-keys", Amount: 3, RequestId: idemkey.NewV7()}
		_, err := plain.PlaceOrder(ctx, req)
		if status.Code(err) != codes.InvalidArgument || idemgrpc.Reason(err) != idemgrpc.ReasonInvalidKey {
			t.Fatalf("two keys: %v (reason %q), want InvalidArgument, %s", err, idemgrpc.Reason(err), idemgrpc.ReasonInvalidKey)
		}
		if _, err := keyed.PlaceOrder(ctx, req); err == nil {
			t.Fatal("two keys through the client interceptor: no error")
		}
		if n := len(env.placed(t, orders, "two-keys")); n != 0 {
			t.Fatalf("two keys: the call ran %d times", n)
		}
	})
}
