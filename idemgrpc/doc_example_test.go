package idemgrpc_test

// The code docs/grpc.md shows. Each ```go block of the page is the body of one of
// the docs* functions below (or, for a whole file, its declarations), verbatim:
// TestDocsQuoteExamples checks it, the examples run it.

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemhttp"
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

// lineageOrders is the middle of the lineage example: a gRPC handler that books
// a shipment with an HTTP API through idemhttp.Transport.
type lineageOrders struct {
	orderspb.UnimplementedOrdersServer
	shipments string // the HTTP API's URL
	client    *http.Client
	runs      *atomic.Int64
}

func (o lineageOrders) PlaceOrder(ctx context.Context, req *orderspb.PlaceOrderRequest) (*orderspb.Order, error) {
	o.runs.Add(1)
	// ctx carries the call's key lineage: the Transport derives the shipment's key from it.
	hreq, err := http.NewRequestWithContext(ctx, "POST", o.shipments, strings.NewReader(req.GetCustomer()))
	if err != nil {
		return nil, err
	}
	resp, err := o.client.Do(hreq)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	defer resp.Body.Close()
	shipment, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &orderspb.Order{OrderId: string(shipment), Customer: req.GetCustomer(), Amount: req.GetAmount()}, nil
}

// The lineage docs/grpc.md describes, HTTP → gRPC → HTTP: an HTTP API behind
// idemhttp.Middleware calls a gRPC service behind the interceptor, whose handler
// calls a shipments API through idemhttp.Transport. The whole request is made
// twice with one Idempotency-Key, against two deployments of the first two tiers
// whose stores hold nothing (the second lost the first one's records, as a crash
// before they were stored would): both tiers run again, and the shipments API sees
// the same key both times, so it ships once.
func Example_docsLineage() {
	var shipped atomic.Int64
	shipStore, err := idemmem.New(idemmem.Config{})
	if err != nil {
		panic(err)
	}
	shipOnce, err := idemhttp.Middleware(idemhttp.Config{Store: shipStore})
	if err != nil {
		panic(err)
	}
	shipments := httptest.NewServer(shipOnce(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "shipment-%d", shipped.Add(1))
	})))
	defer shipments.Close()

	var grpcRuns atomic.Int64
	deploy := func() (string, func()) {
		grpcStore, err := idemmem.New(idemmem.Config{})
		if err != nil {
			panic(err)
		}
		once, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{Store: grpcStore, RequireKey: true})
		if err != nil {
			panic(err)
		}
		orders := lineageOrders{shipments: shipments.URL, client: &http.Client{Transport: &idemhttp.Transport{}}, runs: &grpcRuns}
		addr, stopGRPC := docsLoopback(func(lis net.Listener) error {
			srv := grpc.NewServer(grpc.UnaryInterceptor(once))
			orderspb.RegisterOrdersServer(srv, orders)
			return srv.Serve(lis)
		})
		keys, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})
		if err != nil {
			panic(err)
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(keys))
		if err != nil {
			panic(err)
		}
		client := orderspb.NewOrdersClient(conn)
		apiStore, err := idemmem.New(idemmem.Config{})
		if err != nil {
			panic(err)
		}
		apiOnce, err := idemhttp.Middleware(idemhttp.Config{Store: apiStore})
		if err != nil {
			panic(err)
		}
		api := httptest.NewServer(apiOnce(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// r.Context() carries the request's key lineage: the gRPC call's key derives from it.
			order, err := client.PlaceOrder(r.Context(), &orderspb.PlaceOrderRequest{Customer: "tea-shop", Amount: 3})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			fmt.Fprint(w, order.GetOrderId())
		})))
		return api.URL, func() { api.Close(); conn.Close(); stopGRPC() }
	}
	for run := 1; run <= 2; run++ {
		url, stop := deploy()
		req, err := http.NewRequest("POST", url+"/orders", strings.NewReader("tea"))
		if err != nil {
			panic(err)
		}
		req.Header.Set(idemhttp.HeaderKey, "order-7f1c")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("deployment %d: %s\n", run, body)
		stop()
	}
	fmt.Println("gRPC handler runs:", grpcRuns.Load(), "shipments:", shipped.Load())
	// Output:
	// deployment 1: shipment-1
	// deployment 2: shipment-1
	// gRPC handler runs: 2 shipments: 1
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
