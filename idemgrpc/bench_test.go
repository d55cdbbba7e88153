package idemgrpc_test

import (
	"context"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// benchTarget is one benchmarked mode, ready to call.
type benchTarget struct {
	mode benchMode
	call func(key string) // one call, checked
	keys *benchKeys
	// clients is the number of goroutines that call it at once.
	clients int
}

// run makes n calls from t.clients goroutines.
func (t *benchTarget) run(n int) {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for range t.clients {
		wg.Go(func() {
			var buf []byte
			for left.Add(-1) >= 0 {
				t.call(t.keys.next(buf))
			}
		})
	}
	wg.Wait()
}

// parallel measures t alone with RunParallel, t.clients goroutines at once.
func (t *benchTarget) parallel(b *testing.B) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism(max(1, (t.clients+procs-1)/procs))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var buf []byte
		for pb.Next() {
			t.call(t.keys.next(buf))
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// interleaved runs targets in alternation: each iteration is a round in which
// every target makes perRound calls, the one going first rotating from round to
// round. A round is short, so its targets see the same load on the machine; the
// ratios reported (mode/bare: the bare target's time over the mode's, so 0.9 is
// 10% fewer calls a second) are the medians of the rounds' ratios, which a burst
// of load elsewhere does not skew. targets[0] is the bare one.
func interleaved(b *testing.B, targets []*benchTarget, perRound int) {
	for _, t := range targets {
		t.run(perRound / 4) // warm up connections, pools and maps
	}
	ratios := make([][]float64, len(targets))
	b.ResetTimer()
	for round := range b.N {
		spent := make([]time.Duration, len(targets))
		for j := range targets {
			i := (round + j) % len(targets)
			start := time.Now()
			targets[i].run(perRound)
			spent[i] = time.Since(start)
		}
		for i := range targets {
			ratios[i] = append(ratios[i], spent[0].Seconds()/spent[i].Seconds())
		}
	}
	for i, t := range targets[1:] {
		r := ratios[i+1]
		slices.Sort(r)
		b.ReportMetric(r[len(r)/2], t.mode.name+"/bare")
	}
}

// BenchmarkUnaryServerInterceptor measures the server interceptor beside the bare
// handler in the same run, two ways:
//
//   - loopback/*: Orders.PlaceOrder over a real grpc-go connection on 127.0.0.1
//     (benchClients goroutines over benchConns connections), with the bare server
//     (no interceptor), the interceptor with a new key per call, and the
//     interceptor replaying one key; on idemmem and on a durable idemsqlite.
//   - inproc/*: the interceptor function called directly (one goroutine per P)
//     with a handler that returns a fixed order, so its own cost shows without
//     the network.
//
// Each mode alone (ns/op, allocs/op) is for profiles and allocations; the
// */interleaved* sub-benchmarks alternate the modes in short rounds and report the
// median ratio of the rounds, which holds on a machine whose load changes during
// the run: run them with -benchtime Nx for N rounds (BENCHMARKS.md has the
// commands).
func BenchmarkUnaryServerInterceptor(b *testing.B) {
	for _, m := range benchModes {
		b.Run("loopback/"+m.name, func(b *testing.B) { newLoopbackTarget(b, m).parallel(b) })
	}
	// Two interleaved sets, so that a round of the memory store's modes stays
	// short: a durable SQLite claim waits for an fsync.
	b.Run("loopback/interleaved", func(b *testing.B) {
		targets := make([]*benchTarget, 3)
		for i, m := range benchModes[:3] {
			targets[i] = newLoopbackTarget(b, m)
		}
		interleaved(b, targets, 400)
	})
	b.Run("loopback/interleaved-sqlite", func(b *testing.B) {
		targets := []*benchTarget{newLoopbackTarget(b, benchModes[0])}
		for _, m := range benchModes[3:] {
			targets = append(targets, newLoopbackTarget(b, m))
		}
		interleaved(b, targets, 100)
	})
	for _, m := range benchModes[:3] {
		b.Run("inproc/"+m.name, func(b *testing.B) { newInProcessTarget(b, m).parallel(b) })
	}
	b.Run("inproc/interleaved", func(b *testing.B) {
		targets := make([]*benchTarget, 3)
		for i, m := range benchModes[:3] {
			targets[i] = newInProcessTarget(b, m)
		}
		interleaved(b, targets, 20000)
	})
}

func newLoopbackTarget(b *testing.B, m benchMode) *benchTarget {
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
	var next atomic.Int64
	call := func(key string) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, key)
		o, err := clients[int(next.Add(1))%benchConns].PlaceOrder(ctx, req)
		if err != nil || o.GetCustomer() != req.Customer {
			b.Errorf("%s: %v, %v", m.name, o, err)
		}
	}
	for range benchConns {
		call(benchReplayedKey) // opens the connections; the key the replay modes replay
	}
	return &benchTarget{mode: m, call: call, keys: &benchKeys{replay: m.replay}, clients: benchClients}
}

// benchStream is the transport stream of an in-process call: it takes the
// headers and trailers the interceptor sets, as grpc-go's would.
type benchStream struct{}

func (benchStream) Method() string                  { return orderspb.Orders_PlaceOrder_FullMethodName }
func (benchStream) SetHeader(md metadata.MD) error  { return nil }
func (benchStream) SendHeader(md metadata.MD) error { return nil }
func (benchStream) SetTrailer(md metadata.MD) error { return nil }

func newInProcessTarget(b *testing.B, m benchMode) *benchTarget {
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
	return &benchTarget{mode: m, call: call, keys: &benchKeys{replay: m.replay}, clients: runtime.GOMAXPROCS(0)}
}
