package idemgrpc_test

import (
	"context"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
)

// The loopback benchmarks' clients: benchClients goroutines share benchConns
// client connections (HTTP/2, so calls multiplex on each).
const (
	benchClients = 8
	benchConns   = 2
)

// benchReplayedKey is the key the replay modes send on every call; the benchmark
// places it once before timing.
const benchReplayedKey = "replayed-key"

// benchStore opens the store of a mode: nil for bare, idemmem, or a durable
// idemsqlite (synchronous=FULL) in the benchmark's temporary directory.
func benchStore(b *testing.B, store string) idem.Store {
	switch store {
	case "":
		return nil
	case "sqlite":
		s, err := idemsqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), idemsqlite.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	s, err := idemmem.New(idemmem.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchMode is one sub-benchmark: the bare handler, or the interceptor on a store
// answering a new key per call or one key replayed.
type benchMode struct {
	name   string
	store  string // "" for bare
	replay bool
}

var benchModes = []benchMode{
	{name: "bare"},
	{name: "new-key", store: "mem"},
	{name: "replay", store: "mem", replay: true},
	{name: "sqlite-new-key", store: "sqlite"},
	{name: "sqlite-replay", store: "sqlite", replay: true},
}

// benchKeys makes the key of each call: the replayed one, or a new one per call.
// Every mode sends a key, the bare one too, so the clients do the same work in
// every mode and the difference is the interceptor's.
type benchKeys struct {
	replay bool
	seq    atomic.Int64
}

func (k *benchKeys) next(buf []byte) string {
	if k.replay {
		return benchReplayedKey
	}
	return string(strconv.AppendInt(append(buf[:0], "order-"...), k.seq.Add(1), 10))
}

// BenchmarkUnaryServerInterceptor measures the server interceptor beside the bare
// handler in the same run, two ways:
//
//   - loopback/*: Orders.PlaceOrder over a real grpc-go connection on 127.0.0.1
//     (benchClients goroutines over benchConns connections), with the bare server
//     (no interceptor), the interceptor with a new key per call, and the
//     interceptor replaying one key; on idemmem and on a durable idemsqlite.
//   - inproc/*: the interceptor function called directly with a handler that
//     returns a fixed order, so its own cost shows without the network.
//
// Run the rounds alternately (see BENCHMARKS.md) and compare with benchstat:
//
//	go test -c -o /tmp/idemgrpc.test ./idemgrpc
//	for r in 1 2 3 4 5 6; do /tmp/idemgrpc.test -test.run '^$' \
//	  -test.bench BenchmarkUnaryServerInterceptor -test.benchmem -test.cpu 1,2; done
func BenchmarkUnaryServerInterceptor(b *testing.B) {
	for _, m := range benchModes {
		b.Run("loopback/"+m.name, func(b *testing.B) { benchLoopback(b, m) })
	}
	for _, m := range benchModes[:3] {
		b.Run("inproc/"+m.name, func(b *testing.B) { benchInProcess(b, m) })
	}
}

func benchLoopback(b *testing.B, m benchMode) {
	var opts []grpc.ServerOption
	if store := benchStore(b, m.store); store != nil {
		mw, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{Store: store})
		if err != nil {
			b.Fatal(err)
		}
		opts = append(opts, grpc.UnaryInterceptor(mw))
	}
	addr := grpctest.Serve(b, grpc.NewServer(opts...), &grpctest.Orders{})
	clients := make([]orderspb.OrdersClient, benchConns)
	for i := range clients {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		clients[i] = orderspb.NewOrdersClient(conn)
	}
	req := &orderspb.PlaceOrderRequest{Customer: "tea-shop", Amount: 3}
	place := func(client orderspb.OrdersClient, key string) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, key)
		o, err := client.PlaceOrder(ctx, req)
		if err != nil || o.GetCustomer() != req.Customer {
			b.Errorf("%s: %v, %v", m.name, o, err)
		}
	}
	for _, c := range clients {
		place(c, benchReplayedKey) // opens the connection; the key replay modes replay
	}
	keys := &benchKeys{replay: m.replay}
	var next atomic.Int64
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism(max(1, (benchClients+procs-1)/procs))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		client := clients[int(next.Add(1))%benchConns]
		var buf []byte
		for pb.Next() {
			place(client, keys.next(buf))
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// benchStream is the transport stream of an in-process call: it takes the
// headers and trailers the interceptor sets, as grpc-go's would.
type benchStream struct{}

func (benchStream) Method() string                  { return orderspb.Orders_PlaceOrder_FullMethodName }
func (benchStream) SetHeader(md metadata.MD) error  { return nil }
func (benchStream) SendHeader(md metadata.MD) error { return nil }
func (benchStream) SetTrailer(md metadata.MD) error { return nil }

func benchInProcess(b *testing.B, m benchMode) {
	order := &orderspb.Order{OrderId: "0196f1c2-9d7e-7c3a-8b1e-5f2a4c6d8e90", Customer: "tea-shop", Amount: 3, Execution: 1}
	handler := func(ctx context.Context, req any) (any, error) { return order, nil }
	intercept := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	if store := benchStore(b, m.store); store != nil {
		mw, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{Store: store})
		if err != nil {
			b.Fatal(err)
		}
		intercept = mw
	}
	info := &grpc.UnaryServerInfo{FullMethod: orderspb.Orders_PlaceOrder_FullMethodName}
	req := &orderspb.PlaceOrderRequest{Customer: "tea-shop", Amount: 3}
	base := grpc.NewContextWithServerTransportStream(context.Background(), benchStream{})
	call := func(key string) {
		// What grpc-go hands a server interceptor: the call's incoming metadata.
		ctx := metadata.NewIncomingContext(base, metadata.MD{idemgrpc.MetadataKey: {key}})
		resp, err := intercept(ctx, req, info, handler)
		if err != nil || resp.(*orderspb.Order).GetCustomer() != req.Customer {
			b.Errorf("%s: %v, %v", m.name, resp, err)
		}
	}
	call(benchReplayedKey)
	keys := &benchKeys{replay: m.replay}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var buf []byte
		for pb.Next() {
			call(keys.next(buf))
		}
	})
}
