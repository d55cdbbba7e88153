package idemgrpc_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/orderspb"
)

// exampleOrders is an order service whose PlaceOrder is not idempotent by itself:
// each run places a new order.
type exampleOrders struct {
	orderspb.UnimplementedOrdersServer
	placed atomic.Int64
	// effect, if set, writes the order (through the call's transaction).
	effect func(ctx context.Context, req *orderspb.PlaceOrderRequest) error
}

func (s *exampleOrders) PlaceOrder(ctx context.Context, req *orderspb.PlaceOrderRequest) (*orderspb.Order, error) {
	if s.effect != nil {
		if err := s.effect(ctx, req); err != nil {
			return nil, err
		}
	}
	n := s.placed.Add(1)
	return &orderspb.Order{OrderId: fmt.Sprintf("order-%d", n), Customer: req.GetCustomer(), Amount: req.GetAmount()}, nil
}

// retryPolicy is grpc-go's retry policy (gRFC A6) for the order service: a call
// whose response is lost, or that is answered Unavailable, is sent again, with
// the same idempotency key.
const retryPolicy = `{"methodConfig": [{
  "name": [{"service": "idem.orders.v1.Orders"}],
  "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.05s", "maxBackoff": "1s",
    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
}]}`

// serveExample serves orders on a free loopback port behind idempotent and
// returns a client connection to it, with the client interceptor and the retry
// policy. stop ends both.
func serveExample(idempotent grpc.UnaryServerInterceptor, orders orderspb.OrdersServer) (conn *grpc.ClientConn, stop func()) {
	// server
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idempotent),
		grpc.StreamInterceptor(idemgrpc.StreamServerInterceptor()))
	orderspb.RegisterOrdersServer(srv, orders)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()

	// client
	keys, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})
	if err != nil {
		log.Fatal(err)
	}
	conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(keys), grpc.WithDefaultServiceConfig(retryPolicy))
	if err != nil {
		log.Fatal(err)
	}
	return conn, func() { _ = conn.Close(); srv.Stop() }
}

// The server interceptor runs PlaceOrder once per key and replays its result;
// the client interceptor gives each call a key, the same on every retry grpc-go
// sends. Here the application itself retries a checkout: the context carries the
// checkout's key (idem.WithKey), from which the client derives the call's key, so
// the second attempt is answered with the first one's order.
func ExampleUnaryServerInterceptor() {
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		log.Fatal(err)
	}
	idempotent, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{Store: store, RequireKey: true})
	if err != nil {
		log.Fatal(err)
	}
	orders := &exampleOrders{}
	conn, stop := serveExample(idempotent, orders)
	defer stop()
	client := orderspb.NewOrdersClient(conn)

	ctx := idem.WithKey(context.Background(), "checkout-8d1f")
	for range 2 {
		var header metadata.MD
		o, err := client.PlaceOrder(ctx, &orderspb.PlaceOrderRequest{Customer: "ada", Amount: 1200}, grpc.Header(&header))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s for %s, replayed: %v\n", o.GetOrderId(), o.GetCustomer(), idemgrpc.Replayed(header))
	}
	fmt.Println("orders placed:", orders.placed.Load())
	// Output:
	// order-1 for ada, replayed: false
	// order-1 for ada, replayed: true
	// orders placed: 1
}

// In atomic mode the handler writes through the call's transaction (TxFrom),
// which also claims the key and stores the response: the order and its response
// commit together, or not at all.
func ExampleAtomicUnaryServerInterceptor() {
	dir, err := os.MkdirTemp("", "idem-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(dir, "app.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := store.DB().ExecContext(ctx, "CREATE TABLE orders (customer TEXT NOT NULL, amount INTEGER NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	db, err := idemsql.SQLDB(ctx, store.DB()) // the store's database: one transaction for both
	if err != nil {
		log.Fatal(err)
	}
	idempotent, err := idemgrpc.AtomicUnaryServerInterceptor(db, store, idemgrpc.Config{RequireKey: true})
	if err != nil {
		log.Fatal(err)
	}
	orders := &exampleOrders{effect: func(ctx context.Context, req *orderspb.PlaceOrderRequest) error {
		tx, _ := idemgrpc.TxFrom[*sql.Tx](ctx)
		_, err := tx.ExecContext(ctx, "INSERT INTO orders (customer, amount) VALUES ($1, $2)", req.GetCustomer(), req.GetAmount())
		return err
	}}
	conn, stop := serveExample(idempotent, orders)
	defer stop()
	client := orderspb.NewOrdersClient(conn)

	// A key the caller keeps, sent on both attempts.
	call := metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, "grace-order-0001")
	for range 2 {
		var header metadata.MD
		o, err := client.PlaceOrder(call, &orderspb.PlaceOrderRequest{Customer: "grace", Amount: 300}, grpc.Header(&header))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s for %s, replayed: %v\n", o.GetOrderId(), o.GetCustomer(), idemgrpc.Replayed(header))
	}
	var n int
	if err := store.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("rows in orders:", n)
	// Output:
	// order-1 for grace, replayed: false
	// order-1 for grace, replayed: true
	// rows in orders: 1
}
