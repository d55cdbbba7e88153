package idemgrpc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
)

// placeOrder is the full method name of the guarded call.
const placeOrder = "/idem.orders.v1.Orders/PlaceOrder"

// rig is one loopback server with the idem interceptor and one client to it.
type rig struct {
	t      *testing.T
	addr   string
	store  idem.Store
	orders *grpctest.Orders
	conn   *grpc.ClientConn
	client orderspb.OrdersClient
}

// rigOpts are the parts of a rig a test changes.
type rigOpts struct {
	// outer run before the idem interceptor, in order.
	outer []grpc.UnaryServerInterceptor
	// server are extra server options (TLS credentials).
	server []grpc.ServerOption
	// dial replaces the client's transport credentials and adds options.
	dial []grpc.DialOption
	// orders replaces the default service.
	orders *grpctest.Orders
	// mw replaces UnaryServerInterceptor(cfg) (the atomic interceptor).
	mw grpc.UnaryServerInterceptor
}

// newRig serves grpctest.Orders behind UnaryServerInterceptor(cfg) on cfg.Store
// (a fresh idemmem store when nil). The client has no interceptor and no retry
// policy unless o.dial adds them, so every status the server answers is seen as is.
func newRig(t *testing.T, cfg idemgrpc.Config, o rigOpts) *rig {
	t.Helper()
	mw := o.mw
	if mw == nil {
		if cfg.Store == nil {
			cfg.Store = newMem(t)
		}
		var err error
		if mw, err = idemgrpc.UnaryServerInterceptor(cfg); err != nil {
			t.Fatal(err)
		}
	}
	orders := o.orders
	if orders == nil {
		orders = &grpctest.Orders{}
	}
	srvOpts := append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(append(o.outer, mw)...)}, o.server...)
	addr := grpctest.Serve(t, grpc.NewServer(srvOpts...), orders)
	dial := o.dial
	if dial == nil {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rig{t: t, addr: addr, store: cfg.Store, orders: orders, conn: conn, client: orderspb.NewOrdersClient(conn)}
}

func newMem(t testing.TB) *idemmem.Store {
	t.Helper()
	s, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// withKey returns ctx with key in its outgoing metadata.
func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, key)
}

// call is one PlaceOrder and all it was answered.
type call struct {
	order   *orderspb.Order
	err     error
	header  metadata.MD
	trailer metadata.MD
}

// place calls PlaceOrder for customer with key ("" sends none).
func (r *rig) place(ctx context.Context, key, customer string, amount int64) call {
	if key != "" {
		ctx = withKey(ctx, key)
	}
	var c call
	c.order, c.err = r.client.PlaceOrder(ctx, &orderspb.PlaceOrderRequest{Customer: customer, Amount: amount},
		grpc.Header(&c.header), grpc.Trailer(&c.trailer))
	return c
}

// wantStatus fails the test unless err is a status of code whose ErrorInfo says reason.
func wantStatus(t testing.TB, err error, code codes.Code, reason string) *status.Status {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || idemgrpc.Reason(err) != reason {
		t.Fatalf("got %v (reason %q), want %v with reason %q", err, idemgrpc.Reason(err), code, reason)
	}
	return st
}

// gate blocks the executions of chosen customers until opened, and says when one
// has started: the tests drive "a call is running" by progress, never by time.
type gate struct {
	customer string
	started  chan struct{}
	open     chan struct{}
	once     sync.Once
}

func newGate(customer string) *gate {
	return &gate{customer: customer, started: make(chan struct{}, 16), open: make(chan struct{})}
}

// before is an Orders.Before that holds g's customer.
func (g *gate) before(_ context.Context, req *orderspb.PlaceOrderRequest) {
	if req.GetCustomer() != g.customer {
		return
	}
	g.started <- struct{}{}
	<-g.open
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// flakyStore is a Store whose calls fail while fail is set, and that counts claims.
type flakyStore struct {
	idem.Store
	fail   atomic.Bool
	claims atomic.Int64
}

var errDown = errors.New("flaky store: connection refused")

func (f *flakyStore) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	f.claims.Add(1)
	if f.fail.Load() {
		return idem.Result{}, &idem.BackendError{Backend: "flaky", Op: "claim", Err: errDown}
	}
	return f.Store.Claim(ctx, c)
}

// recorder is an outermost server interceptor that records the metadata key and
// the request_id of every attempt that reaches the server.
type recorder struct {
	mu   sync.Mutex
	keys []string // "" for an attempt without a key
	ids  []string
}

func (r *recorder) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	id := ""
	if p, ok := req.(*orderspb.PlaceOrderRequest); ok {
		id = p.GetRequestId()
	}
	r.mu.Lock()
	r.keys = append(r.keys, strings.Join(md.Get(idemgrpc.MetadataKey), ","))
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	return h(ctx, req)
}

func (r *recorder) seen() (keys, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...), append([]string(nil), r.ids...)
}
