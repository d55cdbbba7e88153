package idemgrpc_test

// The code docs/grpc.md shows. Each ```go block of the page is the body of one of
// the docs* functions below (or, for a whole file, its declarations), verbatim:
// TestDocsQuoteExamples checks it, the examples run it.

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
)

// docsServer is the page's server: the interceptor after authentication, and the
// stream interceptor that refuses keyed streams.
func docsServer(ctx context.Context, store idem.Store, auth grpc.UnaryServerInterceptor, orders orderspb.OrdersServer, lis net.Listener) error {
	once, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{
		Store:      store, // idemsqlite, idempg, idemmysql, idemredis or idemmem
		RequireKey: true,  // a call without a key is InvalidArgument (default: it runs unguarded)
	})
	if err != nil {
		return err // a bad Config names the field and the fix
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(auth, once), // after authentication: the scope is who it verified
		grpc.StreamInterceptor(idemgrpc.StreamServerInterceptor()),
	)
	orderspb.RegisterOrdersServer(srv, orders)
	return srv.Serve(lis)
}

// docsClient is the page's client: a key per logical call, above grpc-go's
// retries.
func docsClient(ctx context.Context, addr string, creds credentials.TransportCredentials) error {
	const retryPolicy = `{"methodConfig": [{
	  "name": [{"service": "idem.orders.v1.Orders"}],
	  "retryPolicy": {
	    "maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
	    "retryableStatusCodes": ["UNAVAILABLE"]
	  }
	}]}`
	keys, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{}) // a UUIDv7 per call
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithUnaryInterceptor(keys), // above the retries: every attempt carries the call's key
		grpc.WithDefaultServiceConfig(retryPolicy),
	)
	if err != nil {
		return err
	}
	defer conn.Close()
	orders := orderspb.NewOrdersClient(conn)
	var header metadata.MD
	order, err := orders.PlaceOrder(ctx, &orderspb.PlaceOrderRequest{Customer: "tea-shop", Amount: 3}, grpc.Header(&header))
	if err != nil {
		return err // the status after the retries; idemgrpc.Reason(err) names idem's own refusals
	}
	fmt.Printf("%d for %s, replayed: %v\n", order.GetAmount(), order.GetCustomer(), idemgrpc.Replayed(header))
	return nil
}

// docsOwnKey is the page's call with a key the caller already has.
func docsOwnKey(ctx context.Context, orders orderspb.OrdersClient, orderKey string) error {
	ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, orderKey) // the key the user's submission carried
	var header metadata.MD
	_, err := orders.PlaceOrder(ctx, &orderspb.PlaceOrderRequest{Customer: "tea-shop", Amount: 3}, grpc.Header(&header))
	switch idemgrpc.Reason(err) {
	case "":
		fmt.Println("placed, replayed:", idemgrpc.Replayed(header))
	case idemgrpc.ReasonKeyReused: // FailedPrecondition: the key was used for another request
		return fmt.Errorf("one key for two different orders: %w", err)
	case idemgrpc.ReasonKeyExpired: // the server forgot the key: the first call may have taken effect
		return fmt.Errorf("look the order up before placing it again with a new key: %w", err)
	default:
		return err
	}
	return nil
}

// docsAtomicServer is the page's atomic server: the claim, the handler's writes
// and the stored result in one SQLite transaction.
func docsAtomicServer(ctx context.Context, store *idemsqlite.Store, orders orderspb.OrdersServer, lis net.Listener) error {
	db, err := idemsql.SQLDB(ctx, store.DB()) // one database for the keys and the orders
	if err != nil {
		return err
	}
	once, err := idemgrpc.AtomicUnaryServerInterceptor(db, store, idemgrpc.Config{})
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(once))
	orderspb.RegisterOrdersServer(srv, orders) // atomicOrders{}: its handler writes through TxFrom
	return srv.Serve(lis)
}

// atomicOrders writes each order through the call's transaction: the order, the
// key and the stored response commit together, or none of them does.
type atomicOrders struct {
	orderspb.UnimplementedOrdersServer
}

func (atomicOrders) PlaceOrder(ctx context.Context, req *orderspb.PlaceOrderRequest) (*orderspb.Order, error) {
	tx, ok := idemgrpc.TxFrom[*sql.Tx](ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "PlaceOrder runs behind idemgrpc.AtomicUnaryServerInterceptor")
	}
	var id int64
	err := tx.QueryRowContext(ctx, "INSERT INTO orders (customer, amount) VALUES (?, ?) RETURNING id",
		req.GetCustomer(), req.GetAmount()).Scan(&id)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error()) // transient: rolled back, and a retry runs again
	}
	return &orderspb.Order{OrderId: strconv.FormatInt(id, 10), Customer: req.GetCustomer(), Amount: req.GetAmount()}, nil
}

// docsScope is the page's scope from an authentication interceptor.
func docsScope(ctx context.Context, store idem.Store, userFrom func(context.Context) (string, bool)) error {
	once, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{
		Store: store,
		// The caller the authentication interceptor before this one verified.
		Scope: func(ctx context.Context) (string, error) {
			user, ok := userFrom(ctx)
			if !ok {
				return "", status.Error(codes.Unauthenticated, "no verified caller")
			}
			return "user:" + user, nil
		},
	})
	if err != nil {
		return err
	}
	_ = once
	return nil
}

// docsRequestField is the page's AIP-155 key in the request.
func docsRequestField(ctx context.Context, store idem.Store) error {
	once, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{
		Store:        store,
		Methods:      []string{orderspb.Orders_PlaceOrder_FullMethodName}, // the methods whose requests have the field
		RequestField: "request_id",                                        // AIP-155; "idempotency_key" for AEP-155
	})
	if err != nil {
		return err
	}
	keys, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{RequestField: "request_id"})
	if err != nil {
		return err
	}
	_, _ = once, keys
	return nil
}

// docsLoopback starts a server on 127.0.0.1 with serve and returns its address
// and a function that stops it.
func docsLoopback(serve func(net.Listener) error) (string, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = serve(lis) }()
	return lis.Addr().String(), func() { lis.Close() }
}

// The server and client docs/grpc.md shows: a call placed through the client
// interceptor, then a call with the caller's own key, twice; the handler runs
// once for that key.
func Example_docsServerAndClient() {
	ctx := context.Background()
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		panic(err)
	}
	auth := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req) // a real one verifies the caller's credentials
	}
	orders := &grpctest.Orders{}
	addr, stop := docsLoopback(func(lis net.Listener) error { return docsServer(ctx, store, auth, orders, lis) })
	defer stop()
	if err := docsClient(ctx, addr, insecure.NewCredentials()); err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	key := idemkey.NewV7()
	for range 2 {
		if err := docsOwnKey(ctx, orderspb.NewOrdersClient(conn), key); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println("executions:", orders.Executions())
	// Output:
	// 3 for tea-shop, replayed: false
	// placed, replayed: false
	// placed, replayed: true
	// executions: 2
}

// The atomic server docs/grpc.md shows, on SQLite: two calls with one key write
// one order.
func Example_docsAtomic() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idemgrpc-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := idemsqlite.Open(ctx, filepath.Join(dir, "orders.db"), idemsqlite.Config{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if _, err := store.DB().ExecContext(ctx, "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, amount INTEGER NOT NULL)"); err != nil {
		panic(err)
	}
	addr, stop := docsLoopback(func(lis net.Listener) error { return docsAtomicServer(ctx, store, atomicOrders{}, lis) })
	defer stop()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	key := idemkey.NewV7()
	for range 2 {
		if err := docsOwnKey(ctx, orderspb.NewOrdersClient(conn), key); err != nil {
			fmt.Println(err)
		}
	}
	var n int
	if err := store.DB().QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// placed, replayed: false
	// placed, replayed: true
	// orders: 1
}

// The scope and the AIP-155 configurations docs/grpc.md shows are accepted.
func Example_docsConfigs() {
	ctx := context.Background()
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		panic(err)
	}
	userFrom := func(context.Context) (string, bool) { return "ada", true }
	fmt.Println(docsScope(ctx, store, userFrom), docsRequestField(ctx, store))
	// Output: <nil> <nil>
}

// docsBlockRE finds the ```go blocks of a Markdown page.
var docsBlockRE = regexp.MustCompile("(?s)```go\n(.*?)```")

// docs/grpc.md quotes compiled, running code: each of its Go blocks is, verbatim,
// the body of a function of this file (indented one tab), or for a whole file,
// its declarations after the imports. (readme_test.go compiles the blocks too;
// this test ties them to the examples that run them.)
func TestDocsQuoteExamples(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "docs", "grpc.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("doc_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := docsBlockRE.FindAllStringSubmatch(string(page), -1)
	if len(blocks) < 5 {
		t.Fatalf("docs/grpc.md has %d Go blocks: the pattern no longer matches, or the page lost its code", len(blocks))
	}
	for i, b := range blocks {
		code := b[1]
		var quoted string
		if strings.HasPrefix(code, "package ") {
			_, decls, ok := strings.Cut(code, "\n)\n\n")
			if !ok {
				t.Errorf("block %d of docs/grpc.md is a whole file without an import block", i+1)
				continue
			}
			quoted = decls
		} else {
			lines := strings.SplitAfter(code, "\n")
			for j, l := range lines {
				if l != "\n" && l != "" {
					lines[j] = "\t" + l
				}
			}
			quoted = strings.Join(lines, "")
		}
		if !strings.Contains(string(src), quoted) {
			first, _, _ := strings.Cut(code, "\n")
			t.Errorf("block %d of docs/grpc.md (starting %q) is not in idemgrpc/doc_example_test.go: copy the changed code into both", i+1, first)
		}
	}
}
