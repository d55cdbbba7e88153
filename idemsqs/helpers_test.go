package idemsqs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqs"
	"github.com/idemhq/idem/idemsqs/sqsfake"
	"github.com/idemhq/idem/idemtest"
)

var queues atomic.Int64

// fixture is a fresh FIFO queue on an in-process fake SQS, with a sink.
type fixture struct {
	srv   *sqsfake.Server
	c     *sqs.Client
	queue string // the queue's name
	url   string
	sink  *idemsqs.Sink
}

// startFake starts a fake SQS closed when t ends.
func startFake(t testing.TB, cfg sqsfake.Config) *sqsfake.Server {
	t.Helper()
	srv, err := sqsfake.Start(cfg)
	return idemtest.Opened(t, srv, err)
}

// setup makes a FIFO queue on srv (a new fake when nil).
func setup(t testing.TB, srv *sqsfake.Server, qcfg idemsqs.QueueConfig) fixture {
	t.Helper()
	if srv == nil {
		srv = startFake(t, sqsfake.Config{})
	}
	f := fixture{srv: srv, c: srv.Client(), queue: fmt.Sprintf("q%d-%d.fifo", time.Now().UnixNano()%1e6, queues.Add(1))}
	var err error
	if f.url, err = idemsqs.EnsureQueue(context.Background(), f.c, f.queue, qcfg); err != nil {
		t.Fatal(err)
	}
	sink, err := idemsqs.NewSink(f.c, idemsqs.SinkConfig{MaxMessageSize: qcfg.MaxMessageSize})
	f.sink = idemtest.Opened(t, sink, err)
	return f
}

// source opens a source on the fixture's queue, closed when t ends.
func (f fixture) source(t testing.TB, cfg idemsqs.SourceConfig) *idemsqs.Source {
	t.Helper()
	cfg.Queue = f.queue
	if cfg.VisibilityTimeout == 0 {
		cfg.VisibilityTimeout = 3 * time.Second
	}
	src, err := idemsqs.NewSource(context.Background(), f.c, cfg)
	return idemtest.Opened(t, src, err)
}

// env is the fixture as a BrokerEnv: sources are competing consumers of the queue.
func (f fixture) env() idemtest.BrokerEnv {
	return idemtest.BrokerEnv{Topic: f.queue, Sink: f.sink, Features: f.sink.Features(), Redelivery: 3 * time.Second, InFlightPerKey: 10,
		LagApproximate: true, // SQS counts approximately; sqsfake exactly, but the suite asks what SQS promises
		NewSource:      func(t *testing.T) idem.Source { return f.source(t, idemsqs.SourceConfig{}) }}
}
