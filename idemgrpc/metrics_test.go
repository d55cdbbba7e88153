package idemgrpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/grpctest"
)

// counter returns the value of the counter name{label=value} in reg, 0 when absent.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// idem_grpc_requests_total counts each outcome; idem_grpc_refused_total the
// stale key.
func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	g := newGate("slow")
	r := newRig(t, idemgrpc.Config{Registerer: reg, MaxKeyAge: time.Hour}, rigOpts{orders: &grpctest.Orders{Before: g.before}})
	defer g.release()
	bg := context.Background()
	key := idemkey.NewV7()
	r.place(bg, key, "c", 5)               // executed
	r.place(bg, key, "c", 5)               // replayed
	r.place(bg, key, "c", 6)               // mismatch
	r.place(bg, "", "c", 5)                // passthrough
	r.place(withKey(bg, "a"), "b", "c", 5) // rejected: two keys
	stale := (&idemkey.Generator{Now: func() time.Time { return time.Now().Add(-2 * time.Hour) }}).V7()
	r.place(bg, stale, "c", 5) // rejected, stale
	slow := idemkey.NewV7()
	first := make(chan call, 1)
	go func() { first <- r.place(bg, slow, "slow", 5) }()
	<-g.started
	r.place(bg, slow, "slow", 5) // conflict
	g.release()
	<-first // executed

	for outcome, want := range map[string]float64{"executed": 2, "replayed": 1, "mismatch": 1, "passthrough": 1, "rejected": 2, "conflict": 1, "error": 0} {
		if got := counter(t, reg, "idem_grpc_requests_total", "outcome", outcome); got != want {
			t.Errorf("idem_grpc_requests_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	if got := counter(t, reg, "idem_grpc_refused_total", "reason", "stale_key"); got != 1 {
		t.Errorf(`idem_grpc_refused_total{reason="stale_key"} = %v, want 1`, got)
	}
	// A second interceptor on the same registry shares the collectors.
	if _, err := idemgrpc.UnaryServerInterceptor(idemgrpc.Config{Store: newMem(t), Registerer: reg}); err != nil {
		t.Fatal(err)
	}
}
