package idemkafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestTransformConfig: every invalid field is refused with its name.
func TestTransformConfig(t *testing.T) {
	t.Parallel()
	ok := idemkafka.TransformConfig{Brokers: []string{"localhost:9092"}, Group: "g", Topics: []string{"in"}, TransactionalID: "etl-0"}
	fn := func(context.Context, *kgo.Record) ([]*kgo.Record, error) { return nil, nil }
	for _, tc := range []struct {
		field  string
		modify func(*idemkafka.TransformConfig)
	}{
		{"Brokers", func(c *idemkafka.TransformConfig) { c.Brokers = nil }},
		{"Group", func(c *idemkafka.TransformConfig) { c.Group = "" }},
		{"Topics", func(c *idemkafka.TransformConfig) { c.Topics = nil }},
		{"Topics", func(c *idemkafka.TransformConfig) { c.Topics = []string{"in", ""} }},
		{"TransactionalID", func(c *idemkafka.TransformConfig) { c.TransactionalID = "" }},
		{"TransactionalID", func(c *idemkafka.TransformConfig) { c.TransactionalID = strings.Repeat("x", 201) }},
		{"TransactionalID", func(c *idemkafka.TransformConfig) { c.TransactionalID = "pod 1" }},
		{"Workers", func(c *idemkafka.TransformConfig) { c.Workers = -1 }},
		{"Workers", func(c *idemkafka.TransformConfig) { c.Workers = 65 }},
		{"MaxBatch", func(c *idemkafka.TransformConfig) { c.MaxBatch = 10_001 }},
		{"TransactionTimeout", func(c *idemkafka.TransformConfig) { c.TransactionTimeout = 500 * time.Millisecond }},
		{"TransactionTimeout", func(c *idemkafka.TransformConfig) { c.TransactionTimeout = time.Hour }},
		{"RetryDelay", func(c *idemkafka.TransformConfig) { c.RetryDelay = -time.Second }},
		{"DeadLetterTopic", func(c *idemkafka.TransformConfig) { c.DeadLetterTopic = "in" }},
	} {
		cfg := ok
		tc.modify(&cfg)
		_, err := idemkafka.NewTransform(cfg, fn)
		if !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), "TransformConfig."+tc.field) {
			t.Errorf("%s: got %v, want an input error naming TransformConfig.%s", tc.field, err, tc.field)
		}
	}
	if _, err := idemkafka.NewTransform(ok, nil); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("nil fn: got %v, want an input error", err)
	}
	tf, err := idemkafka.NewTransform(ok, fn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = tf.Run(ctx)
	if err := tf.Run(ctx); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("second Run: got %v, want an input error", err)
	}
}

// TestTransformExactlyOnce: with two workers, a transient failure on every tenth
// record's first try and a permanent one on input 7, a read_committed reader
// sees each other input's output once and input 7 in the dead-letter topic once;
// the outputs continue the inputs' traces; the metrics count what committed.
func TestTransformExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	const n = 400
	e.produce(t, 0, n)

	var mu sync.Mutex
	tried := make(map[string]bool)
	fn := func(ctx context.Context, in *kgo.Record) ([]*kgo.Record, error) {
		v := string(in.Value)
		mu.Lock()
		first := !tried[v]
		tried[v] = true
		mu.Unlock()
		switch {
		case v == "in-00007":
			return nil, idem.Permanent(errors.New("undecodable"))
		case first && strings.HasSuffix(v, "0"):
			return nil, errTransient
		}
		return e.upper(ctx, in)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reg := prometheus.NewRegistry()
	cfg := e.config("etl", 2)
	cfg.DeadLetterTopic, cfg.Registerer, cfg.TracerProvider, cfg.Propagator = e.dead, reg, tp, propagation.TraceContext{}

	r := start(t, cfg, fn, nil)
	testsvc.Eventually(t, time.Minute, "every input committed", func() bool { return r.tf.Committed() >= n })
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	out := e.read(t, e.out, true)
	delete(out, "out-00007")
	want := make(map[string]int, n-1)
	for i := range n {
		if i != 7 {
			want[fmt.Sprintf("out-%05d", i)] = 1
		}
	}
	for v, c := range out {
		if want[v] != c {
			t.Errorf("output %s appears %d times", v, c)
		}
	}
	if len(out) != n-1 {
		t.Errorf("read_committed output has %d distinct values, want %d", len(out), n-1)
	}
	if dead := e.read(t, e.dead, true); len(dead) != 1 || dead["in-00007"] != 1 {
		t.Errorf("dead letters %v, want in-00007 once", dead)
	}
	if got := r.tf.Committed(); got != n {
		t.Errorf("Committed() = %d, want %d", got, n)
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "idem_kafka_transform_records_total", "consumed")); got != n {
		t.Errorf("consumed records metric %v, want %d", got, n)
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "idem_kafka_transactions_total", "aborted")); got < 1 {
		t.Errorf("aborted transactions metric %v, want at least 1 (the transient failures)", got)
	}
	var txns, records int
	for _, s := range rec.Ended() {
		switch s.Name() {
		case idemkafka.SpanTransaction:
			txns++
		case idemkafka.SpanTransform:
			records++
			if len(s.Links()) != 1 {
				t.Errorf("record span has %d links, want 1 (its transaction)", len(s.Links()))
			}
		}
	}
	if txns == 0 || records < n {
		t.Errorf("spans: %d transactions, %d records; want some and at least %d", txns, records, n)
	}
}

// TestTransformTraceContext: an input's traceparent is the parent of its record
// span, and the output carries that span's context.
func TestTransformTraceContext(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	traceID := trace.TraceID{0xa, 0xb, 0xc}
	in := &kgo.Record{Topic: e.in, Value: []byte("in-00000"), Headers: []kgo.RecordHeader{
		{Key: "traceparent", Value: fmt.Appendf(nil, "00-%s-%s-01", traceID, trace.SpanID{7})}}}
	if err := e.producer.ProduceSync(context.Background(), in).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	cfg := e.config("trace", 1)
	cfg.TracerProvider, cfg.Propagator = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), propagation.TraceContext{}
	r := start(t, cfg, e.upper, nil)
	testsvc.Eventually(t, time.Minute, "the input committed", func() bool { return r.tf.Committed() == 1 })
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.ConsumeTopics(e.out), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got *kgo.Record
	for got == nil {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("no output")
		}
		if rs := fs.Records(); len(rs) > 0 {
			got = rs[0]
		}
	}
	var tp string
	for _, h := range got.Headers {
		if h.Key == "traceparent" {
			tp = string(h.Value)
		}
	}
	var span sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == idemkafka.SpanTransform {
			span = s
		}
	}
	if span == nil || span.SpanContext().TraceID() != traceID || span.Parent().SpanID() != (trace.SpanID{7}) {
		t.Fatalf("record span %v does not continue the input's trace %s", span, traceID)
	}
	if want := fmt.Sprintf("00-%s-%s-01", traceID, span.SpanContext().SpanID()); tp != want {
		t.Errorf("output traceparent %q, want %q (the record span)", tp, want)
	}
}

// TestTransformPermanentStops: without a dead-letter topic, a permanent failure
// stops Run with that error and commits nothing of its batch.
func TestTransformPermanentStops(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	e.produce(t, 0, 10)
	fn := func(ctx context.Context, in *kgo.Record) ([]*kgo.Record, error) {
		if string(in.Value) == "in-00003" {
			return nil, idem.Permanent(errors.New("undecodable"))
		}
		return e.upper(ctx, in)
	}
	r := start(t, e.config("perm", 1), fn, nil)
	var err error
	select {
	case err = <-r.done:
		close(r.done)
	case <-time.After(time.Minute):
		t.Fatal("Run did not stop on a permanent failure")
	}
	if !idem.IsPermanent(err) || !strings.Contains(err.Error(), "undecodable") || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("Run: %v, want the permanent error with the record's position", err)
	}
	if out := e.read(t, e.out, true); out["out-00003"] != 0 {
		t.Errorf("output of the failed record is visible: %v", out)
	}
}

// TestTransformCrashes is the proof: inputs arrive in rounds while instance "b"
// (two workers) runs throughout and instance "a" (two workers) joins each round,
// produces a batch's outputs and crashes before its transaction ends, closing
// its clients with the transaction open (so the group rebalances each time).
// Each restart of "a" fences the producers of the crashed one and aborts what
// they left open; instance "c" crashes the same way and is never restarted, so
// the broker's transaction timeout aborts its transaction. A read_uncommitted
// reader then sees the crashed transactions' outputs (more records than inputs),
// while a read_committed reader sees every input's output exactly once.
func TestTransformCrashes(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	const perRound, rounds = 300, 4
	b := start(t, e.config("b", 2), e.upper, nil)
	var all []*running
	all = append(all, b)
	crashes := 0
	for round := range rounds {
		e.produce(t, round*perRound, (round+1)*perRound)
		id := "a"
		if round == rounds-1 {
			id = "c"
		}
		var txns atomic.Int32
		a := start(t, e.config(id, 2), e.upper, func(int) bool {
			return txns.Add(1) < 3 // the third transaction of the instance crashes
		})
		all = append(all, a)
		select {
		case err := <-a.done:
			close(a.done)
			if !errors.Is(err, idemkafka.ErrCrashed) {
				t.Fatalf("round %d: Run of %q returned %v, want the crash", round, id, err)
			}
			crashes++
		case <-time.After(time.Minute):
			t.Logf("round %d: instance %q saw no third transaction (b took the work)", round, id)
			a.wait(t)
		}
	}
	if crashes < 2 {
		t.Fatalf("only %d of %d instances crashed mid-transaction; the test proved too little", crashes, rounds)
	}
	n := rounds * perRound
	e.produce(t, n, n+perRound)
	n += perRound
	a := start(t, e.config("a", 2), e.upper, nil) // fences the last crashed "a"
	all = append(all, a)
	testsvc.Eventually(t, 2*time.Minute, "every input committed", func() bool { return committedSum(all...) >= int64(n) })
	for _, r := range []*running{a, b} {
		if err := r.wait(t); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	if got := committedSum(all...); got != int64(n) {
		t.Errorf("the transactions committed %d consumed records, want %d", got, n)
	}
	// Instance c's transaction ends only at its timeout (3s): the LSO waits for it.
	testsvc.Eventually(t, time.Minute, "the crashed transactions aborted", func() bool {
		return reachedLSO(t, e)
	})
	uncommitted := e.read(t, e.out, false)
	if total(uncommitted) <= n {
		t.Errorf("read_uncommitted sees %d outputs for %d inputs: the crashes left no aborted output, so they proved nothing", total(uncommitted), n)
	}
	exactlyOnce(t, e.read(t, e.out, true), n)
	t.Logf("%d crashes; %d outputs written, %d visible to read_committed", crashes, total(uncommitted), n)
}

// reachedLSO reports whether no transaction is open on the output topic: its last
// stable offsets equal its high watermarks.
func reachedLSO(t testing.TB, e *txEnv) bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	lso, hwm := endOffsets(ctx, t, cl, e.out, true), endOffsets(ctx, t, cl, e.out, false)
	for p, h := range hwm {
		if lso[p] != h {
			return false
		}
	}
	return true
}

// TestTransformFencesZombie: a worker pauses between producing its outputs and
// ending its transaction (a GC pause, a network partition); meanwhile its
// replacement starts with the same transactional ID. The replacement fences it:
// the zombie's transaction cannot commit when it wakes, its Run returns
// ErrFenced, and the output is exactly once.
func TestTransformFencesZombie(t *testing.T) {
	t.Parallel()
	e := newTxEnv(t)
	const n = 200
	e.produce(t, 0, n)
	paused, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	zombie := start(t, e.config("z", 1), e.upper, func(int) bool {
		first := false
		once.Do(func() { first = true })
		if first {
			close(paused)
			<-release
		}
		return true
	})
	select {
	case <-paused:
	case <-time.After(time.Minute):
		t.Fatal("the zombie never transacted")
	}
	replacement := start(t, e.config("z", 1), e.upper, nil)
	testsvc.Eventually(t, time.Minute, "the replacement committed a transaction", func() bool { return replacement.tf.Committed() > 0 })
	close(release)
	var err error
	select {
	case err = <-zombie.done:
		close(zombie.done)
	case <-time.After(time.Minute):
		t.Fatal("the zombie's Run did not return after it was fenced")
	}
	if !errors.Is(err, idemkafka.ErrFenced) {
		t.Fatalf("zombie Run: %v, want ErrFenced", err)
	}
	if got := zombie.tf.Committed(); got != 0 {
		t.Errorf("the zombie committed %d records after it was fenced", got)
	}
	testsvc.Eventually(t, time.Minute, "the replacement committed every input", func() bool { return replacement.tf.Committed() >= n })
	if err := replacement.wait(t); err != nil {
		t.Errorf("replacement Run: %v", err)
	}
	exactlyOnce(t, e.read(t, e.out, true), n)
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name, label string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if (l.GetName() == "kind" || l.GetName() == "outcome") && l.GetValue() == label {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sum"})
	c.Add(sum)
	return c
}
