// Package grpctest holds the fixtures of idem's gRPC tests: an order service that
// counts its executions per logical call, a loopback server, the retry service
// config, a hedging interceptor and a response-dropping fault.
package grpctest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/internal/orderspb"
)

// RetryServiceConfig turns on grpc-go's retry policy (gRFC A6) for the order
// service: five attempts, retrying UNAVAILABLE, with a short backoff.
const RetryServiceConfig = `{
  "methodConfig": [{
    "name": [{"service": "idem.orders.v1.Orders"}],
    "waitForReady": true,
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.01s",
      "maxBackoff": "0.2s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// Orders is the order service: PlaceOrder records an order under the request's
// customer (each test call uses its own, so the customer names the logical call)
// and counts the executions per customer.
type Orders struct {
	orderspb.UnimplementedOrdersServer
	// Before, if set, runs first in every execution (a pause, a kill).
	Before func(ctx context.Context, req *orderspb.PlaceOrderRequest)
	// Effect, if set, records the order; it may write through the call's
	// transaction (idemgrpc.TxFrom).
	Effect func(ctx context.Context, req *orderspb.PlaceOrderRequest, order *orderspb.Order) error

	executions atomic.Int64
	mu         sync.Mutex
	per        map[string]int
	orders     map[string]*orderspb.Order
}

// PlaceOrder runs one execution.
func (o *Orders) PlaceOrder(ctx context.Context, req *orderspb.PlaceOrderRequest) (*orderspb.Order, error) {
	n := o.executions.Add(1)
	if o.Before != nil {
		o.Before(ctx, req)
	}
	if req.GetPauseMs() > 0 {
		time.Sleep(time.Duration(req.GetPauseMs()) * time.Millisecond)
	}
	if req.GetAmount() <= 0 {
		return nil, status.Error(codes.InvalidArgument, "amount: must be positive")
	}
	order := &orderspb.Order{OrderId: uuid.NewString(), Customer: req.GetCustomer(), Amount: req.GetAmount(), Execution: n}
	if o.Effect != nil {
		if err := o.Effect(ctx, req, order); err != nil {
			return nil, err
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.per == nil {
		o.per, o.orders = map[string]int{}, map[string]*orderspb.Order{}
	}
	o.per[req.GetCustomer()]++
	o.orders[order.OrderId] = order
	return order, nil
}

// GetOrder reads an order.
func (o *Orders) GetOrder(_ context.Context, req *orderspb.GetOrderRequest) (*orderspb.Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ord, ok := o.orders[req.GetOrderId()]; ok {
		return ord, nil
	}
	return nil, status.Errorf(codes.NotFound, "order %q not found", req.GetOrderId())
}

// Executions is the number of PlaceOrder runs, completed or not.
func (o *Orders) Executions() int64 { return o.executions.Load() }

// Placed returns how many orders were recorded for customer.
func (o *Orders) Placed(customer string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.per[customer]
}

// Serve starts srv on a free port of 127.0.0.1, with orders registered, and stops
// it at the end of the test. It returns the address.
func Serve(t testing.TB, srv *grpc.Server, orders orderspb.OrdersServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	orderspb.RegisterOrdersServer(srv, orders)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}
