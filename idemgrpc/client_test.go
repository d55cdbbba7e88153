package idemgrpc_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
)

// clientDial returns the dial options of a client with UnaryClientInterceptor(cfg)
// and grpc-go's retry policy.
func clientDial(t *testing.T, cfg idemgrpc.ClientConfig) []grpc.DialOption {
	t.Helper()
	keys, err := idemgrpc.UnaryClientInterceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(keys), grpc.WithDefaultServiceConfig(grpctest.RetryServiceConfig)}
}

// failFirst is a server interceptor that answers the first n attempts of each
// customer Unavailable before they reach the idem interceptor, as a proxy or a
// draining server would: grpc-go's retry policy sends them again.
func failFirst(n int) grpc.UnaryServerInterceptor {
	var mu sync.Mutex
	seen := map[string]int{}
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		c := req.(*orderspb.PlaceOrderRequest).GetCustomer()
		mu.Lock()
		seen[c]++
		fail := seen[c] <= n
		mu.Unlock()
		if fail {
			return nil, status.Error(codes.Unavailable, "draining")
		}
		return h(ctx, req)
	}
}

// Each call gets its own key, a UUIDv7 that carries its time.
func TestClientKeyPerCall(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	r := newRig(t, idemgrpc.Config{RequireKey: true, RequireTimedKeys: true},
		rigOpts{outer: []grpc.UnaryServerInterceptor{rec.intercept}, dial: clientDial(t, idemgrpc.ClientConfig{})})
	for range 2 {
		if c := r.place(context.Background(), "", "c", 5); c.err != nil {
			t.Fatal(c.err)
		}
	}
	keys, _ := rec.seen()
	if len(keys) != 2 || keys[0] == keys[1] {
		t.Fatalf("keys %q: want two distinct", keys)
	}
	for _, k := range keys {
		if kind, err := idemkey.Parse(k); err != nil || kind != idemkey.KindUUIDv7 {
			t.Fatalf("key %q is a %v (%v), want a UUIDv7", k, kind, err)
		}
		if _, timed := idemkey.TimeOf(k); !timed {
			t.Fatalf("key %q carries no time", k)
		}
	}
}

// Every attempt of grpc-go's retry policy carries the call's one key, and the
// call takes effect once.
func TestClientKeySameOnEveryRetry(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	r := newRig(t, idemgrpc.Config{RequireKey: true},
		rigOpts{outer: []grpc.UnaryServerInterceptor{rec.intercept, failFirst(2)}, dial: clientDial(t, idemgrpc.ClientConfig{})})
	c := r.place(context.Background(), "", "c", 5)
	if c.err != nil {
		t.Fatal(c.err)
	}
	keys, _ := rec.seen()
	if len(keys) != 3 || keys[0] == "" || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("the attempts carried %q: want one key three times", keys)
	}
	if n := r.orders.Executions(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}

// Where the key comes from: the call's own metadata, else the context's lineage
// (derived per method, equal across calls), else ClientConfig.NewKey.
func TestClientKeySources(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	r := newRig(t, idemgrpc.Config{}, rigOpts{outer: []grpc.UnaryServerInterceptor{rec.intercept},
		dial: clientDial(t, idemgrpc.ClientConfig{NewKey: func() string { return "made-by-NewKey" }})})
	bg := context.Background()
	lineage := idem.WithKey(bg, "parent-7")
	calls := []call{
		r.place(bg, "explicit-1", "c", 5),
		r.place(lineage, "", "c", 5),
		r.place(lineage, "", "c", 5),
		r.place(bg, "", "c", 5),
	}
	for i, c := range calls {
		if c.err != nil {
			t.Fatalf("call %d: %v", i, c.err)
		}
	}
	keys, _ := rec.seen()
	derived := idemkey.Derive("parent-7", placeOrder)
	if want := []string{"explicit-1", derived, derived, "made-by-NewKey"}; !equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	if !idemgrpc.Replayed(calls[2].header) || !proto.Equal(calls[1].order, calls[2].order) {
		t.Fatal("the second call of one lineage was not replayed")
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ClientConfig.RequestField fills the key into a copy of the request (the
// caller's message is unchanged), or takes the key from it when set; the server
// reads it from there when the metadata carries none.
func TestClientRequestField(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	r := newRig(t, idemgrpc.Config{RequestField: "request_id", RequireKey: true},
		rigOpts{outer: []grpc.UnaryServerInterceptor{rec.intercept}, dial: clientDial(t, idemgrpc.ClientConfig{RequestField: "request_id"})})
	bg := context.Background()
	req := &orderspb.PlaceOrderRequest{Customer: "c", Amount: 5}
	if _, err := r.client.PlaceOrder(bg, req); err != nil {
		t.Fatal(err)
	}
	if req.GetRequestId() != "" {
		t.Fatalf("the caller's request was changed: %v", req)
	}
	if _, err := r.client.PlaceOrder(bg, &orderspb.PlaceOrderRequest{RequestId: "rid-1", Customer: "c", Amount: 5}); err != nil {
		t.Fatal(err)
	}
	keys, ids := rec.seen()
	if keys[0] == "" || ids[0] != keys[0] || keys[1] != "rid-1" || ids[1] != "rid-1" {
		t.Fatalf("keys %q, request ids %q", keys, ids)
	}
	_, err := r.client.PlaceOrder(withKey(bg, "other"), &orderspb.PlaceOrderRequest{RequestId: "rid-2", Customer: "c", Amount: 5})
	if err == nil || status.Code(err) != codes.Unknown {
		t.Fatalf("two keys: %v, want the client interceptor's error", err)
	}
	if keys, _ := rec.seen(); len(keys) != 2 {
		t.Fatalf("the call with two keys was sent: %q", keys)
	}

	// A client without the interceptor: the server reads the field alone, and
	// refuses a field that disagrees with the metadata.
	plain := orderspb.NewOrdersClient(dialPlain(t, r.addr))
	var h metadata.MD
	if _, err := plain.PlaceOrder(bg, &orderspb.PlaceOrderRequest{RequestId: "rid-1", Customer: "c", Amount: 5}, grpc.Header(&h)); err != nil || !idemgrpc.Replayed(h) {
		t.Fatalf("the field alone: %v, header %v: want the replay of rid-1", err, h)
	}
	_, err = plain.PlaceOrder(withKey(bg, "other"), &orderspb.PlaceOrderRequest{RequestId: "rid-1", Customer: "c", Amount: 5})
	wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonInvalidKey)
	if n := r.orders.Executions(); n != 2 {
		t.Fatalf("%d executions, want 2", n)
	}
}

func dialPlain(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// ClientConfig.Methods keys only the listed methods; a call that carries two keys
// is not sent.
func TestClientMethodsAndTwoKeys(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	r := newRig(t, idemgrpc.Config{}, rigOpts{outer: []grpc.UnaryServerInterceptor{rec.intercept},
		dial: clientDial(t, idemgrpc.ClientConfig{Methods: []string{"/idem.orders.v1.Orders/GetOrder"}})})
	if c := r.place(context.Background(), "", "c", 5); c.err != nil {
		t.Fatal(c.err)
	}
	if keys, _ := rec.seen(); len(keys) != 1 || keys[0] != "" {
		t.Fatalf("keys %q: PlaceOrder is not in ClientConfig.Methods", keys)
	}

	all := newRig(t, idemgrpc.Config{}, rigOpts{outer: []grpc.UnaryServerInterceptor{rec.intercept}, dial: clientDial(t, idemgrpc.ClientConfig{})})
	ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, "a", idemgrpc.MetadataKey, "b")
	if c := all.place(ctx, "", "c", 5); c.err == nil {
		t.Fatal("a call with two keys was sent")
	}
	if keys, _ := rec.seen(); len(keys) != 1 {
		t.Fatalf("the call with two keys reached the server: %q", keys)
	}
	// An empty key set on purpose is a mistake, not "no key": the call is not sent.
	ctx = metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, "")
	if c := all.place(ctx, "", "c", 5); c.err == nil || !strings.Contains(c.err.Error(), "empty") {
		t.Fatalf("a call with an empty key: %v", c.err)
	}
	if keys, _ := rec.seen(); len(keys) != 1 {
		t.Fatalf("the call with an empty key reached the server: %q", keys)
	}
}

// A handler behind the server interceptor that calls another service through
// UnaryClientInterceptor derives the downstream key from its own: the key and
// scope of the upstream call, then the method. When the upstream handler runs
// again (its first execution failed after the downstream call, and grpc-go
// retried), the downstream call carries the same key and is replayed: the
// downstream effect happens once.
func TestLineageServerToClient(t *testing.T) {
	t.Parallel()
	downRec := &recorder{}
	down := newRig(t, idemgrpc.Config{RequireKey: true}, rigOpts{outer: []grpc.UnaryServerInterceptor{downRec.intercept}})
	keys, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	downConn, err := grpc.NewClient(down.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(keys))
	if err != nil {
		t.Fatal(err)
	}
	defer downConn.Close()
	downstream := orderspb.NewOrdersClient(downConn)

	var mu sync.Mutex
	var replays []bool
	upFail := failOnce(func() error { return status.Error(codes.Unavailable, "lost after the downstream call") })
	upOrders := &grpctest.Orders{Effect: func(ctx context.Context, req *orderspb.PlaceOrderRequest, o *orderspb.Order) error {
		var h metadata.MD
		if _, err := downstream.PlaceOrder(ctx, &orderspb.PlaceOrderRequest{Customer: "down-" + req.GetCustomer(), Amount: req.GetAmount()}, grpc.Header(&h)); err != nil {
			return err
		}
		mu.Lock()
		replays = append(replays, idemgrpc.Replayed(h))
		mu.Unlock()
		return upFail(ctx, req, o)
	}}
	upRec := &recorder{}
	up := newRig(t, idemgrpc.Config{RequireKey: true},
		rigOpts{orders: upOrders, outer: []grpc.UnaryServerInterceptor{upRec.intercept}, dial: clientDial(t, idemgrpc.ClientConfig{})})
	if c := up.place(context.Background(), "", "c", 5); c.err != nil {
		t.Fatal(c.err)
	}
	upKeys, _ := upRec.seen()
	downKeys, _ := downRec.seen()
	want := idemkey.Derive(idemkey.Derive(upKeys[0], "anonymous"), placeOrder)
	if len(upKeys) != 2 || upKeys[0] != upKeys[1] || !equal(downKeys, []string{want, want}) {
		t.Fatalf("upstream keys %q, downstream keys %q: want the downstream %q twice", upKeys, downKeys, want)
	}
	if n := down.orders.Executions(); n != 1 || !equal(fmtBools(replays), []string{"false", "true"}) {
		t.Fatalf("downstream ran %d times, replays %v", n, replays)
	}
	if n := upOrders.Executions(); n != 2 {
		t.Fatalf("upstream ran %d times, want 2", n)
	}
}

func fmtBools(bs []bool) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = "false"
		if b {
			out[i] = "true"
		}
	}
	return out
}
