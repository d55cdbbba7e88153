package idemgrpc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
)

func TestSmokeDroppedResponsesRunOnce(t *testing.T) {
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{Store: store, RequireKey: true})
	if err != nil {
		t.Fatal(err)
	}
	var proxy *chaos.Proxy
	var mu sync.Mutex
	dropped := map[string]bool{}
	drop := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		c := req.(*orderspb.PlaceOrderRequest).GetCustomer()
		mu.Lock()
		first := !dropped[c]
		dropped[c] = true
		mu.Unlock()
		if first {
			proxy.Down() // the response is lost: the connection is gone before it is written
			if err := proxy.Up(); err != nil {
				t.Error(err)
			}
		}
		return resp, err
	}
	orders := &grpctest.Orders{}
	addr := grpctest.Serve(t, grpc.NewServer(grpc.ChainUnaryInterceptor(drop, mw)), orders)
	if proxy, err = chaos.NewProxy("grpc", addr); err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	keys, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(proxy.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(keys), grpc.WithDefaultServiceConfig(grpctest.RetryServiceConfig))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := orderspb.NewOrdersClient(conn)
	for i := range 20 {
		c := fmt.Sprintf("c%d", i)
		var header metadata.MD
		o, err := client.PlaceOrder(context.Background(), &orderspb.PlaceOrderRequest{Customer: c, Amount: 5}, grpc.Header(&header))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if o.GetCustomer() != c || !idemgrpc.Replayed(header) {
			t.Fatalf("call %d: got %v, header %v: want a replay", i, o, header)
		}
		if n := orders.Placed(c); n != 1 {
			t.Fatalf("call %d ran %d times", i, n)
		}
	}
}
