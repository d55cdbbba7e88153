package idemnats_test

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// envNATS points the tests at a NATS server with JetStream.
const envNATS = "IDEM_TEST_NATS_URL"

// testAckWait is short so the suite's redelivery checks take seconds, not minutes.
const testAckWait = 2 * time.Second

func natsURL() string {
	if u := os.Getenv(envNATS); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// connect returns a JetStream context on the test NATS (skipping when it is down),
// its connection closed when t ends.
func connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	u, err := url.Parse(natsURL())
	if err != nil {
		t.Fatalf("%s=%q: %v", envNATS, natsURL(), err)
	}
	testsvc.Reach(t, "nats", u.Host)
	nc, err := nats.Connect(natsURL())
	if err != nil {
		t.Fatalf("connect to %s: %v", natsURL(), err)
	}
	t.Cleanup(nc.Close)
	return nc, jsOf(t, nc)
}

func jsOf(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// embeddedJS connects t to a fresh embedded server in a temporary directory, shut
// down when t ends.
func embeddedJS(t testing.TB) (*natsserver.Server, jetstream.JetStream) {
	t.Helper()
	return embeddedJSWith(t, natsserver.ServerConfig{})
}

// embeddedJSWith is embeddedJS with cfg (its Dir is t's).
func embeddedJSWith(t testing.TB, cfg natsserver.ServerConfig) (*natsserver.Server, jetstream.JetStream) {
	t.Helper()
	cfg.Dir = t.TempDir()
	srv, err := natsserver.StartServer(cfg)
	if err != nil {
		t.Fatalf("StartServer: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return srv, jsOf(t, nc)
}

// newStream creates a stream of its own for t, capturing "<prefix>.>", deleted
// when t ends. It returns the stream's name and the subject prefix.
func newStream(t testing.TB, js jetstream.JetStream) (stream, prefix string) {
	t.Helper()
	stream = testsvc.UniqueName("IDEMTEST_")
	prefix = testsvc.UniqueName("idemtest.")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}}); err != nil {
		t.Fatalf("EnsureStream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, stream)
	})
	return stream, prefix
}

// openSource opens a source on stream for durable, closed when t ends.
func openSource(t testing.TB, js jetstream.JetStream, cfg idemnats.SourceConfig) *idemnats.Source {
	t.Helper()
	if cfg.AckWait == 0 {
		cfg.AckWait = testAckWait
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src, err := idemnats.NewSource(ctx, js, cfg)
	return idemtest.Opened(t, src, err)
}

func newSink(t testing.TB, js jetstream.JetStream, cfg idemnats.SinkConfig) *idemnats.Sink {
	t.Helper()
	s, err := idemnats.NewSink(js, cfg)
	if err != nil {
		t.Fatalf("NewSink: %v", err)
	}
	return s
}

// brokerEnv builds the suite's environment on js: a stream, a sink, and sources
// of one durable.
func brokerEnv(js jetstream.JetStream) func(t *testing.T) idemtest.BrokerEnv {
	return func(t *testing.T) idemtest.BrokerEnv {
		stream, prefix := newStream(t, js)
		sink := newSink(t, js, idemnats.SinkConfig{})
		return idemtest.BrokerEnv{
			Topic: prefix + ".orders",
			Sink:  sink,
			NewSource: func(t *testing.T) idem.Source {
				return openSource(t, js, idemnats.SourceConfig{Stream: stream, Durable: "workers"})
			},
			Features:   sink.Features(),
			Redelivery: testAckWait,
		}
	}
}

func TestBrokerSuite(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	idemtest.BrokerSuite(t, brokerEnv(js))
}

func TestBrokerSuiteEmbedded(t *testing.T) {
	t.Parallel()
	_, js := embeddedJS(t)
	idemtest.BrokerSuite(t, brokerEnv(js))
}

// The idemtest helpers under the names these tests use.
var (
	publish  = idemtest.Publish
	receiveN = idemtest.ReceiveN
	ackAll   = idemtest.Ack
)

// streamMsgs is how many messages the stream holds.
func streamMsgs(t testing.TB, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
