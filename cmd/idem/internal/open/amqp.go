package open

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemamqp"
	"github.com/idemhq/idem/internal/redact"
)

// openAMQPSink is relay's --sink amqp://…: RabbitMQ, redialed when the connection
// dies.
func openAMQPSink(s SinkSpec, o *SinkFlags) (idem.Sink, func(), error) {
	a := &amqpSink{url: s.Raw, cfg: idemamqp.SinkConfig{Exchange: o.AMQPExchange, Mandatory: o.AMQPMandatory}}
	if err := a.connect(); err != nil {
		return nil, nil, sinkDown(s, err)
	}
	return a, a.close, nil
}

// openAMQPBroker is verify's --broker amqp://…: the run's own quorum queue, every
// connection through a chaos.Proxy.
func openAMQPBroker(ctx context.Context, b *Broker, raw, run string) error {
	u, err := amqp.ParseURI(raw)
	if err != nil {
		return fmt.Errorf("--broker %q: %s: use amqp://user:pass@host:5672/[vhost]", redact.URL(raw), redact.String(err.Error()))
	}
	b.name = "rabbitmq " + net.JoinHostPort(u.Host, fmt.Sprint(u.Port))
	b.keeps = true
	if err := b.proxyTo("amqp", net.JoinHostPort(u.Host, fmt.Sprint(u.Port))); err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(b.proxy.Addr())
	u.Host = host
	fmt.Sscan(port, &u.Port)
	dial := u.String()
	b.topic = "idem.verify." + run
	admin, err := amqp.Dial(dial)
	if err != nil {
		return fmt.Errorf("--broker %s: %w", redact.URL(raw), err)
	}
	b.cleanup = append(b.cleanup, func() { admin.Close() })
	if err := idemamqp.EnsureQueue(ctx, admin, b.topic, idemamqp.QueueConfig{Quorum: true}); err != nil {
		return fmt.Errorf("--broker %s: %w", redact.URL(raw), err)
	}
	b.cleanup = append(b.cleanup, func() {
		if ch, err := admin.Channel(); err == nil {
			_, _ = ch.QueueDelete(b.topic, false, false, false)
			ch.Close()
		}
	})
	b.openSink = func(ctx context.Context) (idem.Sink, error) {
		conn, err := amqp.Dial(dial)
		if err != nil {
			return nil, err
		}
		s, err := idemamqp.NewSink(conn, idemamqp.SinkConfig{Mandatory: true})
		if err != nil {
			conn.Close()
			return nil, err
		}
		return &ownedSink{s, closer{[]func() error{s.Close, conn.Close}}}, nil
	}
	b.openSource = func(ctx context.Context) (idem.Source, error) {
		conn, err := amqp.Dial(dial)
		if err != nil {
			return nil, err
		}
		s, err := idemamqp.NewSource(conn, idemamqp.SourceConfig{Queue: b.topic, Quorum: true, MaxNakDelay: 100 * time.Millisecond})
		if err != nil {
			conn.Close()
			return nil, err
		}
		return &ownedSource{s, closer{[]func() error{conn.Close}}}, nil
	}
	return nil
}

// amqpSink redials RabbitMQ when its connection died: an idemamqp.Sink replaces a
// dead channel itself, but a dead connection needs a new connection and sink.
type amqpSink struct {
	url string
	cfg idemamqp.SinkConfig

	mu   sync.Mutex
	conn *amqp.Connection
	sink *idemamqp.Sink
}

func (a *amqpSink) connect() error {
	conn, err := amqp.Dial(a.url)
	if err != nil {
		return &idem.BackendError{Backend: idemamqp.Backend, Op: "dial", Err: err}
	}
	sink, err := idemamqp.NewSink(conn, a.cfg)
	if err != nil {
		_ = conn.Close()
		return err
	}
	a.conn, a.sink = conn, sink
	return nil
}

func (a *amqpSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil || a.conn.IsClosed() {
		a.release()
		if err := a.connect(); err != nil {
			return err
		}
	}
	return a.sink.Publish(ctx, msgs...)
}

func (a *amqpSink) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.release()
}

func (a *amqpSink) release() {
	if a.sink != nil {
		_ = a.sink.Close()
	}
	if a.conn != nil {
		_ = a.conn.Close()
	}
	a.conn, a.sink = nil, nil
}
