package verify

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/internal/orderspb"
)

// The client → gRPC API boundary (--api grpc): the order service of writeOrder
// behind idemgrpc.AtomicUnaryServerInterceptor, and a client fleet calling
// Orders.PlaceOrder through idemgrpc.UnaryClientInterceptor and grpc-go's retry
// policy.

// Faults of the client → gRPC API boundary: the gRPC forms of chaos's HTTP faults
// and of FaultPastDeadline.
const (
	// FaultGRPCDropResponse: the service ran the call, and its response is lost on
	// the way back: the server's outermost interceptor answers UNAVAILABLE
	// instead, which grpc-go's retry policy retries with the same metadata.
	FaultGRPCDropResponse = "grpc_response_dropped"
	// FaultGRPCDuplicateCall: the client sends the same call twice at once (a
	// client interceptor below the key interceptor invokes twice).
	FaultGRPCDuplicateCall = "grpc_duplicate_call"
	// FaultGRPCPastDeadline: an order's first call, under a key of its own, waits
	// in the server until its deadline has passed (its client gave up on it and
	// placed the order again under the order's key) and only then reaches the
	// service. idem refuses it (DEADLINE_EXCEEDED or CANCELLED, reason
	// IDEMPOTENCY_CALL_ENDED); without idem the handler gets a context that has
	// ended, which the order's transaction honours.
	FaultGRPCPastDeadline = "grpc_past_deadline"
)

// Metadata the flow adds to its calls, besides idemgrpc.MetadataKey.
const (
	// mdOrder names, on a call sent past its deadline, the key of the order it is a
	// copy of (headerOrder's gRPC form).
	mdOrder = "x-verify-order"
	// mdDrop carries the token of a call whose first response the server drops
	// (FaultGRPCDropResponse): grpc-go resends it with every retry.
	mdDrop = "x-verify-drop"
)

// grpcServiceConfig turns on grpc-go's retry policy (gRFC A6) for the order
// service: five attempts (grpc-go's most), retrying UNAVAILABLE, with the backoff
// of the HTTP clients' idemhttp.Transport. grpc-go waits the
// grpc-retry-pushback-ms idemgrpc sets instead, when there is one.
const grpcServiceConfig = `{
  "methodConfig": [{
    "name": [{"service": "idem.orders.v1.Orders"}],
    "waitForReady": true,
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.002s",
      "maxBackoff": "0.2s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// grpcCallTimeout is the deadline of one PlaceOrder call, its retries included:
// idemhttp.Transport's MaxElapsed in the HTTP flow.
const grpcCallTimeout = time.Minute

// grpcLateTimeout is the deadline of a call sent past its deadline: the server
// holds it until the deadline has passed, so it only has to outlast the call's
// way to the server. A call that has not reached the server by then is not
// counted as a fault (it took no part).
const grpcLateTimeout = time.Second

// grpcAPI is the order service over gRPC.
type grpcAPI struct {
	r    *run
	srv  *grpc.Server
	addr string
}

// startGRPC serves orderspb.Orders on a free loopback port: the fault interceptor
// outermost, then (unless Unsafe) idemgrpc's atomic interceptor on the flow's
// store, configured as the HTTP middleware is.
func (r *run) startGRPC() (orderAPI, error) {
	chain := []grpc.UnaryServerInterceptor{r.grpcServerFaults}
	if !r.f.Unsafe {
		// Key ages are judged on the flow's clock, the one that drives the store's
		// expiry (and jumps); call deadlines are grpc-go's, on the wall clock.
		mw, err := idemgrpc.AtomicUnaryServerInterceptor(r.txdb, r.f.Store, idemgrpc.Config{
			RequireKey: true, Retention: r.f.Retention, Registerer: r.reg, Logger: r.log, Now: r.now,
		})
		if err != nil {
			return nil, err
		}
		chain = append(chain, mw)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(chain...))
	orderspb.RegisterOrdersServer(srv, &grpcOrders{r: r})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	return &grpcAPI{r: r, srv: srv, addr: ln.Addr().String()}, nil
}

func (a *grpcAPI) close() { a.srv.Stop() }

// grpcServerFaults is the server's outermost interceptor: it counts every call
// that reaches the server under its order's key, holds a call sent past its
// deadline until that deadline has passed, and drops the first response of a
// call the client drew FaultGRPCDropResponse for.
func (r *run) grpcServerFaults(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	key, order := first(md, idemgrpc.MetadataKey), first(md, mdOrder)
	if order == "" {
		order = key
	}
	r.received.Add(order)
	if order != key {
		// A call sent past its deadline: it waits here, as in a queue of the
		// server, until its caller has given up on it.
		r.heldCopies.Store(key, true)
		<-ctx.Done()
	}
	resp, err := h(ctx, req)
	if tok := first(md, mdDrop); tok != "" {
		if _, again := r.dropped.LoadOrStore(tok, true); !again {
			return nil, status.Error(codes.Unavailable, "verify: the response was lost on its way back (injected)")
		}
	}
	return resp, err
}

func first(md metadata.MD, k string) string {
	if vs := md.Get(k); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// grpcOrders is the order service over gRPC: writeOrder in the interceptor's
// transaction, or in its own in unsafe mode.
type grpcOrders struct {
	orderspb.UnimplementedOrdersServer
	r *run
}

func (s *grpcOrders) PlaceOrder(ctx context.Context, req *orderspb.PlaceOrderRequest) (*orderspb.Order, error) {
	n := s.r.executions.Add(1)
	if req.GetAmount() <= 0 || req.GetCustomer() == "" {
		return nil, status.Error(codes.InvalidArgument, "want a customer and an amount > 0")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	tx, _ := idemgrpc.TxFrom[*sql.Tx](ctx)
	id, err := s.r.writeOrder(ctx, tx, first(md, idemgrpc.MetadataKey), orderRequest{Customer: req.GetCustomer(), Amount: req.GetAmount()})
	if err != nil {
		// Not stored by idemgrpc: the transaction is rolled back and a retry runs.
		return nil, status.Error(codes.Unavailable, "order service: "+err.Error())
	}
	return &orderspb.Order{OrderId: id, Customer: req.GetCustomer(), Amount: req.GetAmount(), Execution: n}, nil
}

// client returns a client of the service: idemgrpc's key interceptor outermost
// (a no-op here, as every call carries its order's key) and, when faulty, the
// fault interceptor below it, above grpc-go's retries.
func (a *grpcAPI) client(faulty bool) (orderClient, error) {
	c := &grpcClient{r: a.r, attempts: map[string]int{}}
	keys, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})
	if err != nil {
		return nil, err
	}
	chain := []grpc.UnaryClientInterceptor{keys}
	if faulty {
		c.faults = a.r.clientFaults(FaultGRPCDropResponse, FaultGRPCDuplicateCall)
		chain = append(chain, c.inject)
	}
	conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(chain...), grpc.WithDefaultServiceConfig(grpcServiceConfig))
	if err != nil {
		return nil, err
	}
	c.conn, c.orders = conn, orderspb.NewOrdersClient(conn)
	return c, nil
}

type grpcClient struct {
	r      *run
	conn   *grpc.ClientConn
	orders orderspb.OrdersClient
	faults []chaos.Fault
	late   sync.WaitGroup // calls sent past their deadline

	mu       sync.Mutex
	attempts map[string]int // calls by key, as chaos.Transport counts attempts
}

func (c *grpcClient) close() {
	c.late.Wait()
	_ = c.conn.Close()
}

// inject is the client's fault interceptor: for each call (a logical call;
// grpc-go's retries happen below it) it draws a fault from the flow's injector,
// as chaos.Transport does for each HTTP request, and sends the call twice at once,
// marks it for the server to drop its first response, or hands the fault to the
// flow (clock jumps, connection cuts) before sending it.
func (c *grpcClient) inject(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	key := first(md, idemgrpc.MetadataKey)
	c.mu.Lock()
	c.attempts[key]++
	attempt := c.attempts[key]
	c.mu.Unlock()
	switch fault := c.r.inj.Roll("grpc "+key, attempt, c.faults); fault {
	case "":
	case FaultGRPCDropResponse:
		ctx = metadata.AppendToOutgoingContext(ctx, mdDrop, fmt.Sprintf("%s/%d", key, attempt))
	case FaultGRPCDuplicateCall:
		dup := reply.(proto.Message).ProtoReflect().New().Interface()
		var wg sync.WaitGroup
		wg.Go(func() { _ = invoker(ctx, method, req, dup, cc, opts...) })
		err := invoker(ctx, method, req, reply, cc, opts...)
		wg.Wait()
		return err
	default:
		c.r.onFault(fault)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// place is the gRPC form of run.place: the order's key in the metadata, the
// same on every call; grpc-go retries UNAVAILABLE within a call, and the client
// calls again up to 5 times while the answer says to retry.
func (c *grpcClient) place(ctx context.Context, in *intent) {
	req := &orderspb.PlaceOrderRequest{Customer: in.customer, Amount: in.amount}
	if c.r.inj.RollScaled("deadline "+in.key, 0, 0.1, grpcPastDeadlineFaults) != "" {
		c.sendPastDeadline(ctx, in, req)
	}
	kctx := metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, in.key)
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		cctx, cancel := context.WithTimeout(kctx, grpcCallTimeout)
		o, err := c.orders.PlaceOrder(cctx, req)
		cancel()
		if err == nil {
			if !in.accepted {
				in.accepted, in.orderID = true, o.GetOrderId()
			}
			return
		}
		switch status.Code(err) {
		case codes.FailedPrecondition:
			if idemgrpc.Reason(err) == idemgrpc.ReasonKeyExpired {
				return // a late retry, refused: its order was placed long ago
			}
		case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded, codes.Internal, codes.Unknown:
			continue // what an HTTP client retries (409, 429, 5xx)
		}
		c.r.log.Warn("verify: order refused", "key", in.key, "err", err)
		return
	}
}

// grpcPastDeadlineFaults is the fault place rolls for each order before placing it.
var grpcPastDeadlineFaults = []chaos.Fault{{Kind: FaultGRPCPastDeadline, Weight: 1}}

// sendPastDeadline sends in's order under a key of its own, with a deadline the
// server holds it past (grpcServerFaults): a first call that reached the service
// only after its client gave up on it and went on to place the order again, as
// place then does with the order's key. Applied, it would make a second order.
// It runs beside the order's own call, which does not wait for it; close does.
// gRPC deadlines are relative (grpc-timeout), so a call late on the network
// arrives with its whole timeout: the late call of gRPC is one that waits in
// the server, which is how the fault makes it late.
func (c *grpcClient) sendPastDeadline(ctx context.Context, in *intent, req *orderspb.PlaceOrderRequest) {
	key := timedKey(rand.New(rand.NewPCG(uint64(c.r.f.Seed), fnv64(in.key))), c.r.now().Truncate(time.Hour).Add(-time.Hour))
	c.r.pastDeadline.Store(key, in.key)
	c.late.Go(func() {
		lctx := metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, key, mdOrder, in.key)
		lctx, cancel := context.WithTimeout(lctx, grpcLateTimeout)
		defer cancel()
		_, _ = c.orders.PlaceOrder(lctx, req)
		if _, reached := c.r.heldCopies.Load(key); !reached {
			c.r.inj.Cancel(FaultGRPCPastDeadline) // it never reached the server: no fault
		}
	})
}
