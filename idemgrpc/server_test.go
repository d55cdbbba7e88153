package idemgrpc_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
	"github.com/idemhq/idem/internal/testsvc"
)

// Each refusal of doc.go's table that needs no running call: the status, its
// reason, and that the handler did not run.
func TestRefusedKeys(t *testing.T) {
	t.Parallel()
	now := time.Now()
	old := (&idemkey.Generator{Now: func() time.Time { return now.Add(-2 * time.Hour) }}).V7()
	future := (&idemkey.Generator{Now: func() time.Time { return now.Add(time.Hour) }}).V7()
	tests := []struct {
		name   string
		cfg    idemgrpc.Config
		keys   []string // the idempotency-key metadata values sent
		code   codes.Code
		reason string
	}{
		{"missing with RequireKey", idemgrpc.Config{RequireKey: true}, nil, codes.InvalidArgument, idemgrpc.ReasonInvalidKey},
		{"sent twice", idemgrpc.Config{}, []string{"k-1", "k-2"}, codes.InvalidArgument, idemgrpc.ReasonInvalidKey},
		{"sent twice, equal", idemgrpc.Config{}, []string{"k-1", "k-1"}, codes.InvalidArgument, idemgrpc.ReasonInvalidKey},
		{"longer than 255 bytes", idemgrpc.Config{}, []string{strings.Repeat("k", 256)}, codes.InvalidArgument, idemgrpc.ReasonInvalidKey},
		{"empty", idemgrpc.Config{}, []string{""}, codes.InvalidArgument, idemgrpc.ReasonInvalidKey},
		{"older than MaxKeyAge", idemgrpc.Config{MaxKeyAge: time.Hour}, []string{old}, codes.FailedPrecondition, idemgrpc.ReasonKeyExpired},
		{"from the future", idemgrpc.Config{}, []string{future}, codes.InvalidArgument, idemgrpc.ReasonKeyFromFuture},
		{"untimed with RequireTimedKeys", idemgrpc.Config{RequireTimedKeys: true}, []string{"order-42"}, codes.InvalidArgument, idemgrpc.ReasonUntimedKey},
		{"request without RequestField", idemgrpc.Config{RequestField: "idempotency_key"}, []string{"k-1"}, codes.InvalidArgument, idemgrpc.ReasonInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, tt.cfg, rigOpts{})
			ctx := context.Background()
			for _, k := range tt.keys {
				ctx = withKey(ctx, k)
			}
			c := r.place(ctx, "", "c", 5)
			wantStatus(t, c.err, tt.code, tt.reason)
			if n := r.orders.Executions(); n != 0 {
				t.Fatalf("the handler ran %d times", n)
			}
		})
	}
}

// The checks that refuse keys let the others through: a fresh UUIDv7 under
// RequireTimedKeys, an untimed key by default, a key of exactly 255 bytes.
func TestAcceptedKeys(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  idemgrpc.Config
		key  string
	}{
		{"fresh UUIDv7, timed keys required", idemgrpc.Config{RequireTimedKeys: true}, idemkey.NewV7()},
		{"untimed", idemgrpc.Config{}, "order-42"},
		{"255 bytes", idemgrpc.Config{}, strings.Repeat("k", 255)},
		{"old key, ages off", idemgrpc.Config{MaxKeyAge: -1},
			(&idemkey.Generator{Now: func() time.Time { return time.Now().Add(-1000 * time.Hour) }}).V7()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, tt.cfg, rigOpts{})
			if c := r.place(context.Background(), tt.key, "c", 5); c.err != nil {
				t.Fatal(c.err)
			}
		})
	}
}

// A copy that arrives while the first call runs is told Unavailable, with the
// reason, a RetryInfo and the grpc-retry-pushback-ms trailer grpc-go's retry
// policy obeys; once the first call ends, the same key is replayed.
func TestInProgress(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	r := newRig(t, idemgrpc.Config{}, rigOpts{orders: &grpctest.Orders{Before: g.before}})
	defer g.release()
	key := idemkey.NewV7()
	first := make(chan call, 1)
	go func() { first <- r.place(context.Background(), key, "slow", 5) }()
	<-g.started

	c := r.place(context.Background(), key, "slow", 5)
	st := wantStatus(t, c.err, codes.Unavailable, idemgrpc.ReasonKeyInProgress)
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if d := retry.GetRetryDelay().AsDuration(); retry == nil || d <= 0 || d > time.Second {
		t.Fatalf("RetryInfo %v: want a delay in (0, 1s]", retry)
	}
	vs := c.trailer.Get("grpc-retry-pushback-ms")
	if len(vs) != 1 {
		t.Fatalf("trailer %v: want one grpc-retry-pushback-ms", c.trailer)
	}
	if ms, err := strconv.Atoi(vs[0]); err != nil || ms < 1 || ms > 1000 {
		t.Fatalf("grpc-retry-pushback-ms %q: want 1 to 1000", vs[0])
	}

	g.release()
	f := <-first
	if f.err != nil || idemgrpc.Replayed(f.header) {
		t.Fatalf("first call: %v, header %v", f.err, f.header)
	}
	again := r.place(context.Background(), key, "slow", 5)
	if again.err != nil || !proto.Equal(again.order, f.order) || !idemgrpc.Replayed(again.header) {
		t.Fatalf("after the first ended: %v %v, header %v; want the replay of %v", again.order, again.err, again.header, f.order)
	}
	if n := r.orders.Executions(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}

// With Config.Wait, a copy that finds its key in progress waits on the server
// and is answered with the first call's result.
func TestWaitTurnsInProgressIntoReplay(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	store := &flakyStore{Store: newMem(t)}
	r := newRig(t, idemgrpc.Config{Store: store, Wait: time.Hour}, rigOpts{orders: &grpctest.Orders{Before: g.before}})
	defer g.release()
	key := idemkey.NewV7()
	first := make(chan call, 1)
	go func() { first <- r.place(context.Background(), key, "slow", 5) }()
	<-g.started
	second := make(chan call, 1)
	go func() { second <- r.place(context.Background(), key, "slow", 5) }()
	// The second copy has found the key in progress: it waits now.
	testsvc.Eventually(t, time.Minute, "the second copy's claim", func() bool { return store.claims.Load() >= 2 })
	g.release()
	f, s := <-first, <-second
	if f.err != nil || s.err != nil {
		t.Fatalf("first %v, second %v", f.err, s.err)
	}
	if !proto.Equal(f.order, s.order) || idemgrpc.Replayed(f.header) || !idemgrpc.Replayed(s.header) {
		t.Fatalf("first %v (header %v), second %v (header %v): want the second to replay the first", f.order, f.header, s.order, s.header)
	}
	if n := r.orders.Executions(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}

// A Wait that runs out while the first call still runs ends as without Wait:
// Unavailable, key in progress.
func TestWaitRunsOut(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	r := newRig(t, idemgrpc.Config{Wait: time.Millisecond}, rigOpts{orders: &grpctest.Orders{Before: g.before}})
	defer g.release()
	key := idemkey.NewV7()
	first := make(chan call, 1)
	go func() { first <- r.place(context.Background(), key, "slow", 5) }()
	<-g.started
	c := r.place(context.Background(), key, "slow", 5)
	wantStatus(t, c.err, codes.Unavailable, idemgrpc.ReasonKeyInProgress)
	g.release()
	if f := <-first; f.err != nil {
		t.Fatal(f.err)
	}
}

// The handler runs detached from the call: a caller that gives up does not
// cancel it, and its retry is answered with the result.
func TestHandlerOutlivesCaller(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	handlerErr := make(chan error, 1)
	orders := &grpctest.Orders{Before: func(ctx context.Context, req *orderspb.PlaceOrderRequest) {
		g.before(ctx, req)
		handlerErr <- ctx.Err()
	}}
	// gone is closed once the server has seen the caller's cancellation.
	gone := make(chan struct{})
	var once sync.Once
	watch := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		go func() { <-ctx.Done(); once.Do(func() { close(gone) }) }()
		return h(ctx, req)
	}
	r := newRig(t, idemgrpc.Config{Wait: time.Hour}, rigOpts{orders: orders, outer: []grpc.UnaryServerInterceptor{watch}})
	defer g.release()
	key := idemkey.NewV7()
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan call, 1)
	go func() { first <- r.place(ctx, key, "slow", 5) }()
	<-g.started
	cancel()
	if f := <-first; status.Code(f.err) != codes.Canceled {
		t.Fatalf("the caller that gave up: %v", f.err)
	}
	<-gone
	g.release()
	if err := <-handlerErr; err != nil {
		t.Fatalf("the handler's context ended with its caller: %v", err)
	}
	retry := r.place(context.Background(), key, "slow", 5)
	if retry.err != nil || !idemgrpc.Replayed(retry.header) || r.orders.Executions() != 1 {
		t.Fatalf("retry: %v, header %v, %d executions: want the replay", retry.err, retry.header, r.orders.Executions())
	}
}

// The same key on another request is refused FailedPrecondition, whichever part
// of the call differs: the message or a fingerprinted metadata value.
func TestKeyReused(t *testing.T) {
	t.Parallel()
	r := newRig(t, idemgrpc.Config{FingerprintMetadata: []string{"X-Currency"}}, rigOpts{})
	ctx := context.Background()
	key := idemkey.NewV7()
	eur := withKeyAndCurrency(ctx, key, "eur")
	if _, err := r.client.PlaceOrder(eur, &orderspb.PlaceOrderRequest{Customer: "c", Amount: 5}); err != nil {
		t.Fatal(err)
	}
	_, err := r.client.PlaceOrder(eur, &orderspb.PlaceOrderRequest{Customer: "c", Amount: 6})
	wantStatus(t, err, codes.FailedPrecondition, idemgrpc.ReasonKeyReused)
	_, err = r.client.PlaceOrder(withKeyAndCurrency(ctx, key, "usd"), &orderspb.PlaceOrderRequest{Customer: "c", Amount: 5})
	wantStatus(t, err, codes.FailedPrecondition, idemgrpc.ReasonKeyReused)
	if n := r.orders.Executions(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}

func withKeyAndCurrency(ctx context.Context, key, currency string) context.Context {
	return withKey(metadata.AppendToOutgoingContext(ctx, "x-currency", currency), key)
}

// A store that fails is answered Unavailable, with a retry pushback, and the
// handler does not run: running it unclaimed could run it twice.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	store := &flakyStore{Store: newMem(t)}
	store.fail.Store(true)
	r := newRig(t, idemgrpc.Config{Store: store}, rigOpts{})
	key := idemkey.NewV7()
	c := r.place(context.Background(), key, "c", 5)
	wantStatus(t, c.err, codes.Unavailable, idemgrpc.ReasonStoreUnavailable)
	if len(c.trailer.Get("grpc-retry-pushback-ms")) != 1 {
		t.Fatalf("trailer %v: want a pushback", c.trailer)
	}
	if n := r.orders.Executions(); n != 0 {
		t.Fatalf("the handler ran %d times", n)
	}
	store.fail.Store(false)
	if c := r.place(context.Background(), key, "c", 5); c.err != nil {
		t.Fatalf("after the store came back: %v", c.err)
	}
}

// Beyond MaxInFlight a keyed call is refused ResourceExhausted and not run.
func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	g := newGate("slow")
	r := newRig(t, idemgrpc.Config{MaxInFlight: 1}, rigOpts{orders: &grpctest.Orders{Before: g.before}})
	defer g.release()
	first := make(chan call, 1)
	go func() { first <- r.place(context.Background(), idemkey.NewV7(), "slow", 5) }()
	<-g.started
	key := idemkey.NewV7()
	c := r.place(context.Background(), key, "other", 5)
	wantStatus(t, c.err, codes.ResourceExhausted, idemgrpc.ReasonOverloaded)
	if len(c.trailer.Get("grpc-retry-pushback-ms")) != 1 {
		t.Fatalf("trailer %v: want a pushback", c.trailer)
	}
	if c := r.place(context.Background(), "", "unkeyed", 5); c.err != nil {
		t.Fatalf("an unkeyed call is not counted: %v", c.err)
	}
	g.release()
	if f := <-first; f.err != nil {
		t.Fatal(f.err)
	}
	if c := r.place(context.Background(), key, "other", 5); c.err != nil {
		t.Fatalf("once the first call ended: %v", c.err)
	}
	if n := r.orders.Placed("other"); n != 1 {
		t.Fatalf("the refused call ran: %d", n)
	}
}

// A result too large to store reaches the first caller; a retry is told so and
// the handler does not run again.
func TestResultTooLarge(t *testing.T) {
	t.Parallel()
	r := newRig(t, idemgrpc.Config{MaxResponseBytes: 16}, rigOpts{})
	key := idemkey.NewV7()
	c := r.place(context.Background(), key, "c", 5)
	if c.err != nil || c.order.GetCustomer() != "c" {
		t.Fatalf("first call: %v %v", c.order, c.err)
	}
	retry := r.place(context.Background(), key, "c", 5)
	wantStatus(t, retry.err, codes.Internal, idemgrpc.ReasonNotStored)
	if n := r.orders.Executions(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}

// Config.Methods limits the interceptor; a NO_SIDE_EFFECTS method passes through
// by default, even with a key and RequireKey.
func TestMethods(t *testing.T) {
	t.Parallel()
	t.Run("NO_SIDE_EFFECTS passes", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, idemgrpc.Config{RequireKey: true}, rigOpts{})
		ctx := context.Background()
		c := r.place(ctx, idemkey.NewV7(), "c", 5)
		if c.err != nil {
			t.Fatal(c.err)
		}
		for _, key := range []string{"", idemkey.NewV7(), strings.Repeat("k", 300)} {
			cctx := ctx
			if key != "" {
				cctx = withKey(ctx, key)
			}
			o, err := r.client.GetOrder(cctx, &orderspb.GetOrderRequest{OrderId: c.order.GetOrderId()})
			if err != nil || !proto.Equal(o, c.order) {
				t.Fatalf("GetOrder with key %.10q: %v %v", key, o, err)
			}
		}
		_, err := r.client.GetOrder(withKey(ctx, "k"), &orderspb.GetOrderRequest{OrderId: "none"})
		if status.Code(err) != codes.NotFound || idemgrpc.Reason(err) != "" {
			t.Fatalf("the handler's NotFound: got %v", err)
		}
	})
	t.Run("Config.Methods", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, idemgrpc.Config{RequireKey: true, Methods: []string{"/idem.orders.v1.Orders/GetOrder"}}, rigOpts{})
		key := idemkey.NewV7()
		for range 2 {
			if c := r.place(context.Background(), key, "c", 5); c.err != nil || idemgrpc.Replayed(c.header) {
				t.Fatalf("PlaceOrder is not guarded: %v, header %v", c.err, c.header)
			}
		}
		if c := r.place(context.Background(), "", "c", 5); c.err != nil {
			t.Fatalf("PlaceOrder needs no key: %v", c.err)
		}
		if n := r.orders.Placed("c"); n != 3 {
			t.Fatalf("placed %d, want 3", n)
		}
		_, err := r.client.GetOrder(context.Background(), &orderspb.GetOrderRequest{OrderId: "x"})
		wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonInvalidKey)
	})
}

// Every bad Config value is an *idem.InputError naming its field.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	store := newMem(t)
	tests := []struct {
		name  string
		cfg   idemgrpc.Config
		field string
	}{
		{"no store", idemgrpc.Config{}, "Config.Store"},
		{"method without slash", idemgrpc.Config{Store: store, Methods: []string{"PlaceOrder"}}, "Config.Methods"},
		{"method without service", idemgrpc.Config{Store: store, Methods: []string{"/PlaceOrder"}}, "Config.Methods"},
		{"request field", idemgrpc.Config{Store: store, RequestField: "request-id"}, "Config.RequestField"},
		{"negative MaxResponseBytes", idemgrpc.Config{Store: store, MaxResponseBytes: -1}, "Config.MaxResponseBytes"},
		{"negative Wait", idemgrpc.Config{Store: store, Wait: -1}, "Config"},
		{"negative Lease", idemgrpc.Config{Store: store, Lease: -1}, "Config"},
		{"negative Retention", idemgrpc.Config{Store: store, Retention: -1}, "Config"},
		{"timed keys without ages", idemgrpc.Config{Store: store, RequireTimedKeys: true, MaxKeyAge: -1}, "Config.RequireTimedKeys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mw, err := idemgrpc.UnaryServerInterceptor(tt.cfg)
			ie, ok := errors.AsType[*idem.InputError](err)
			if !ok || ie.Field != tt.field || mw != nil {
				t.Fatalf("got %v (%T): want an *idem.InputError for %s", err, err, tt.field)
			}
		})
	}
	for _, tt := range []struct {
		name  string
		cfg   idemgrpc.ClientConfig
		field string
	}{
		{"client method", idemgrpc.ClientConfig{Methods: []string{"idem.orders.v1.Orders/PlaceOrder"}}, "ClientConfig.Methods"},
		{"client request field", idemgrpc.ClientConfig{RequestField: "1st"}, "ClientConfig.RequestField"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := idemgrpc.UnaryClientInterceptor(tt.cfg)
			if ie, ok := errors.AsType[*idem.InputError](err); !ok || ie.Field != tt.field {
				t.Fatalf("got %v: want an *idem.InputError for %s", err, tt.field)
			}
		})
	}
}

// The interceptor lowers metadata names into its own slices: the caller's, and
// DefaultCredentialMetadata shared by every interceptor of the process, are not
// written to (interceptors built in parallel raced on it under -race).
func TestConfigSlicesNotWritten(t *testing.T) {
	t.Parallel()
	creds, fp := []string{"Authorization"}, []string{"X-Currency"}
	for range 2 {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			if _, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{Store: newMem(t)}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{Store: newMem(t), CredentialMetadata: creds, FingerprintMetadata: fp}); err != nil {
		t.Fatal(err)
	}
	if creds[0] != "Authorization" || fp[0] != "X-Currency" {
		t.Fatalf("the caller's slices were written: %q %q", creds, fp)
	}
}
