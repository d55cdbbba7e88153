package idemgrpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/internal/grpctest"
	"github.com/idemhq/idem/internal/orderspb"
)

// A call that reaches the interceptor after its deadline (it waited in the server,
// here held by an outer interceptor until its context ended) is refused
// DeadlineExceeded (or Canceled), reason IDEMPOTENCY_CALL_ENDED, counted as refused for its
// deadline, and not run: its caller has given up and may have placed the order
// again under another key. A call in time with the same key then runs.
func TestCallPastItsDeadlineIsNotRun(t *testing.T) {
	t.Parallel()
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	mw, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{Store: store, RequireKey: true, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	refusals := make(chan error, 1)
	hold := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if req.(*orderspb.PlaceOrderRequest).GetCustomer() == "late" {
			<-ctx.Done() // queued in the server until the caller's deadline passed
			resp, err := h(ctx, req)
			refusals <- err
			return resp, err
		}
		return h(ctx, req)
	}
	orders := &grpctest.Orders{}
	addr := grpctest.Serve(t, grpc.NewServer(grpc.ChainUnaryInterceptor(hold, mw)), orders)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := orderspb.NewOrdersClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, "k-late")

	// The deadline only has to outlast the call's trip to the server; the server
	// holds the call until it passes, whenever that is.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = client.PlaceOrder(short, &orderspb.PlaceOrderRequest{Customer: "late", Amount: 5})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("the held call: %v, want DeadlineExceeded from the client's deadline", err)
	}
	serr := <-refusals
	// DeadlineExceeded, or Canceled when the client's cancellation, sent as its
	// deadline passed, ended the server's context first.
	if c := status.Code(serr); (c != codes.DeadlineExceeded && c != codes.Canceled) || idemgrpc.Reason(serr) != idemgrpc.ReasonCallEnded {
		t.Fatalf("the interceptor answered %v (reason %q), want DeadlineExceeded or Canceled, %s", serr, idemgrpc.Reason(serr), idemgrpc.ReasonCallEnded)
	}
	if n := orders.Executions(); n != 0 {
		t.Fatalf("the handler ran %d times for a call past its deadline", n)
	}
	if n := testutil.ToFloat64(refusedCounter(t, reg)); n != 1 {
		t.Fatalf("idem_grpc_refused_total{reason=\"deadline\"} = %v, want 1", n)
	}
	// The key was not claimed: a call in time runs.
	if _, err := client.PlaceOrder(ctx, &orderspb.PlaceOrderRequest{Customer: "late-retry", Amount: 5}); err != nil {
		t.Fatal(err)
	}
	if n := orders.Executions(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// refusedCounter finds idem_grpc_refused_total{reason="deadline"} in reg.
func refusedCounter(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "idem_grpc_refused_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" && l.GetValue() == "deadline" {
						ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("refused", "", nil, nil), prometheus.CounterValue, m.GetCounter().GetValue())
					}
				}
			}
		}
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }
