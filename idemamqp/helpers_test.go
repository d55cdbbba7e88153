package idemamqp_test

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/idemamqp"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
	amqp "github.com/rabbitmq/amqp091-go"
)

// envAMQP points the tests at a RabbitMQ other than the local default.
const envAMQP = "IDEM_TEST_AMQP_URL"

func amqpURL() string {
	if u := os.Getenv(envAMQP); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// reach skips (or fails, under IDEM_REQUIRE_SERVICES=1) a test without RabbitMQ.
func reach(t testing.TB) {
	t.Helper()
	u, err := amqp.ParseURI(amqpURL())
	if err != nil {
		t.Fatalf("%s=%q: %v", envAMQP, amqpURL(), err)
	}
	testsvc.Reach(t, "rabbitmq", net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
}

// dial opens a connection closed when t ends.
func dial(t testing.TB) *amqp.Connection {
	t.Helper()
	reach(t)
	conn, err := amqp.Dial(amqpURL())
	return idemtest.Opened(t, conn, err)
}

// cuttable is a connection whose socket the test can cut, as a network failure would.
type cuttable struct {
	*amqp.Connection
	mu   sync.Mutex
	sock net.Conn
}

func (c *cuttable) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.sock.Close()
}

func dialCuttable(t testing.TB) *cuttable {
	t.Helper()
	reach(t)
	c := &cuttable{}
	dialer := amqp.DefaultDial(30 * time.Second)
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		sock, err := dialer(network, addr)
		c.mu.Lock()
		c.sock = sock
		c.mu.Unlock()
		return sock, err
	}})
	c.Connection = idemtest.Opened(t, conn, err)
	return c
}

// declareQueue declares a fresh queue on its own connection and deletes it when t
// ends, so tests that break their connections still clean up.
func declareQueue(t testing.TB, cfg idemamqp.QueueConfig) string {
	t.Helper()
	return declareRaw(t, cfg, nil)
}

// declareRaw declares a fresh durable queue; extra arguments (other than those of
// cfg) go to the broker as they are.
func declareRaw(t testing.TB, cfg idemamqp.QueueConfig, extra amqp.Table) string {
	t.Helper()
	name := testsvc.UniqueName("idemtest-")
	admin := dial(t)
	if extra == nil {
		if err := idemamqp.EnsureQueue(context.Background(), admin, name, cfg); err != nil {
			t.Fatalf("EnsureQueue: %v", err)
		}
	} else {
		ch, err := admin.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(name, true, false, false, false, extra); err != nil {
			t.Fatalf("declare %s: %v", name, err)
		}
		_ = ch.Close()
	}
	t.Cleanup(func() { deleteQueue(t, name) })
	return name
}

func deleteQueue(t testing.TB, name string) {
	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Logf("delete queue %s: %v", name, err)
		return
	}
	defer conn.Close()
	if ch, err := conn.Channel(); err == nil {
		_, _ = ch.QueueDelete(name, false, false, false)
	}
}

// The idemtest helpers under the names these tests use.
var (
	publish  = idemtest.Publish
	receive  = idemtest.Receive
	receiveN = idemtest.ReceiveN
	ack      = idemtest.Ack
)

func newSink(t testing.TB, conn *amqp.Connection, cfg idemamqp.SinkConfig) *idemamqp.Sink {
	t.Helper()
	s, err := idemamqp.NewSink(conn, cfg)
	return idemtest.Opened(t, s, err)
}

func newSource(t testing.TB, conn *amqp.Connection, cfg idemamqp.SourceConfig) *idemamqp.Source {
	t.Helper()
	s, err := idemamqp.NewSource(conn, cfg)
	return idemtest.Opened(t, s, err)
}
