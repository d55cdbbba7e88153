package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemamqp"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemredis"
)

// verifyAckWait is how long a delivery stays unacknowledged before the broker
// redelivers it in verify runs: short, so lost acks and crashes resolve quickly.
const verifyAckWait = time.Second

// closer is a sink or source with the connection it owns.
type closer struct {
	close []func() error
}

func (c *closer) Close() error {
	var errs []error
	for _, f := range c.close {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

type ownedSink struct {
	idem.Sink
	closer
}

type ownedSource struct {
	idem.Source
	closer
}

func (s *ownedSource) Close() error {
	return errors.Join(s.Source.Close(), s.closer.Close())
}

// verifyBroker is a verify.Broker and what closes it.
type verifyBroker struct {
	name, topic string
	proxy       *chaos.Proxy
	openSink    func(ctx context.Context) (idem.Sink, error)
	openSource  func(ctx context.Context) (idem.Source, error)
	stored      func(ctx context.Context) (int, bool)
	cumulative  bool // acks are offsets (Kafka)
	cleanup     []func()
}

func (b *verifyBroker) Name() string                                        { return b.name }
func (b *verifyBroker) Topic() string                                       { return b.topic }
func (b *verifyBroker) OpenSink(ctx context.Context) (idem.Sink, error)     { return b.openSink(ctx) }
func (b *verifyBroker) OpenSource(ctx context.Context) (idem.Source, error) { return b.openSource(ctx) }
func (b *verifyBroker) AckWait() time.Duration                              { return verifyAckWait }
func (b *verifyBroker) Proxy() *chaos.Proxy                                 { return b.proxy }
func (b *verifyBroker) Stored(ctx context.Context) (int, bool) {
	if b.stored == nil {
		return 0, false
	}
	return b.stored(ctx)
}

func (b *verifyBroker) close() {
	for i := len(b.cleanup) - 1; i >= 0; i-- {
		b.cleanup[i]()
	}
}

// openVerifyBroker maps --broker to a broker for the run:
//
//	nats:                 embedded NATS JetStream in a temporary directory (default)
//	nats://host:4222      a NATS server with JetStream
//	kafka:                an in-process Kafka cluster (franz-go's kfake)
//	kafka://host:9092     a Kafka cluster
//	redis://host:6379     Redis Streams
//	amqp://user:pass@host RabbitMQ (a quorum queue)
//
// Every run uses its own stream, topic or queue. Connections to NATS, Redis and
// RabbitMQ go through a chaos.Proxy, so the run can cut them.
func openVerifyBroker(ctx context.Context, raw, run string, logger *slog.Logger) (*verifyBroker, error) {
	b := &verifyBroker{}
	ok := false
	defer func() {
		if !ok {
			b.close()
		}
	}()
	scheme, rest, _ := strings.Cut(raw, ":")
	switch scheme {
	case "nats":
		addr := strings.TrimPrefix(rest, "//")
		b.name = "nats " + addr
		if addr == "" {
			dir, err := os.MkdirTemp("", "idem-verify-nats-")
			if err != nil {
				return nil, err
			}
			b.cleanup = append(b.cleanup, func() { os.RemoveAll(dir) })
			srv, err := idemnats.StartServer(idemnats.ServerConfig{Dir: dir})
			if err != nil {
				return nil, fmt.Errorf("--broker nats: start the embedded server: %w", err)
			}
			b.cleanup = append(b.cleanup, srv.Shutdown)
			u, _ := url.Parse(srv.ClientURL())
			addr, b.name = u.Host, "nats (embedded)"
		}
		if err := b.proxyTo("nats", addr); err != nil {
			return nil, err
		}
		connect := func() (*nats.Conn, jetstream.JetStream, error) {
			nc, err := nats.Connect("nats://"+b.proxy.Addr(), nats.Name("idem verify"), nats.MaxReconnects(-1),
				nats.ReconnectWait(20*time.Millisecond), nats.ReconnectJitter(10*time.Millisecond, 10*time.Millisecond),
				nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { logger.Warn("nats", "err", err) }))
			if err != nil {
				return nil, nil, fmt.Errorf("--broker %s: connect: %w", raw, err)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				nc.Close()
				return nil, nil, err
			}
			return nc, js, nil
		}
		stream := "IDEM_VERIFY_" + strings.ToUpper(run)
		b.topic = "idem.verify." + run + ".orders"
		nc, js, err := connect()
		if err != nil {
			return nil, err
		}
		b.cleanup = append(b.cleanup, nc.Close)
		st, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: stream, Subjects: []string{b.topic}})
		if err != nil {
			return nil, fmt.Errorf("--broker %s: %w", raw, err)
		}
		b.cleanup = append(b.cleanup, func() { _ = js.DeleteStream(context.Background(), stream) })
		b.stored = func(ctx context.Context) (int, bool) {
			info, err := st.Info(ctx)
			if err != nil {
				return 0, false
			}
			return int(info.State.Msgs), true
		}
		b.openSink = func(ctx context.Context) (idem.Sink, error) {
			nc, js, err := connect()
			if err != nil {
				return nil, err
			}
			s, err := idemnats.NewSink(js, idemnats.SinkConfig{})
			if err != nil {
				nc.Close()
				return nil, err
			}
			return &ownedSink{s, closer{[]func() error{func() error { nc.Close(); return nil }}}}, nil
		}
		b.openSource = func(ctx context.Context) (idem.Source, error) {
			nc, js, err := connect()
			if err != nil {
				return nil, err
			}
			s, err := idemnats.NewSource(ctx, js, idemnats.SourceConfig{Stream: stream, Durable: "ledger", AckWait: verifyAckWait,
				FetchWait: 500 * time.Millisecond})
			if err != nil {
				nc.Close()
				return nil, err
			}
			return &ownedSource{s, closer{[]func() error{func() error { nc.Close(); return nil }}}}, nil
		}

	case "kafka":
		addrs := strings.TrimPrefix(rest, "//")
		b.name = "kafka " + addrs
		b.topic = "idem-verify-" + run
		b.cumulative = true
		var brokers []string
		if addrs == "" {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, b.topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
			if err != nil {
				return nil, fmt.Errorf("--broker kafka: start kfake: %w", err)
			}
			b.cleanup = append(b.cleanup, c.Close)
			brokers, b.name = c.ListenAddrs(), "kafka (in-process kfake)"
		} else {
			brokers = strings.Split(addrs, ",")
		}
		b.openSink = func(ctx context.Context) (idem.Sink, error) {
			return idemkafka.NewSink(idemkafka.SinkConfig{Brokers: brokers, Options: []kgo.Opt{kgo.AllowAutoTopicCreation()}})
		}
		b.openSource = func(ctx context.Context) (idem.Source, error) {
			return idemkafka.NewSource(idemkafka.SourceConfig{Brokers: brokers, Group: "ledger-" + run, Topics: []string{b.topic},
				CommitInterval: 100 * time.Millisecond,
				Options: []kgo.Opt{kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(200 * time.Millisecond),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AllowAutoTopicCreation()}})
		}

	case "redis", "rediss":
		opts, err := redis.ParseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("--broker %q: %v: use redis://host:6379[/db]", redactURL(raw), err)
		}
		b.name = "redis streams " + opts.Addr
		if err := b.proxyTo("redis", opts.Addr); err != nil {
			return nil, err
		}
		opts.Addr = b.proxy.Addr()
		opts.MaxRetries = -1 // a cut must surface, not be retried inside the client
		b.topic = "idem:verify:" + run + ":orders"
		admin := redis.NewClient(opts)
		b.cleanup = append(b.cleanup, func() { admin.Del(context.Background(), b.topic); admin.Close() })
		if err := admin.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("--broker %s: %w", redactURL(raw), err)
		}
		b.stored = func(ctx context.Context) (int, bool) {
			n, err := admin.XLen(ctx, b.topic).Result()
			return int(n), err == nil
		}
		b.openSink = func(ctx context.Context) (idem.Sink, error) {
			c := redis.NewClient(opts)
			s, err := idemredis.NewStreamSink(c, idemredis.StreamSinkConfig{})
			if err != nil {
				c.Close()
				return nil, err
			}
			return &ownedSink{s, closer{[]func() error{c.Close}}}, nil
		}
		b.openSource = func(ctx context.Context) (idem.Source, error) {
			c := redis.NewClient(opts)
			s, err := idemredis.NewStreamSource(c, idemredis.StreamSourceConfig{Stream: b.topic, Group: "ledger", MinIdle: verifyAckWait,
				Block: 200 * time.Millisecond})
			if err != nil {
				c.Close()
				return nil, err
			}
			return &ownedSource{s, closer{[]func() error{c.Close}}}, nil
		}

	case "amqp", "amqps":
		u, err := amqp.ParseURI(raw)
		if err != nil {
			return nil, fmt.Errorf("--broker %q: %v: use amqp://user:pass@host:5672/[vhost]", redactURL(raw), err)
		}
		b.name = "rabbitmq " + net.JoinHostPort(u.Host, fmt.Sprint(u.Port))
		if err := b.proxyTo("amqp", net.JoinHostPort(u.Host, fmt.Sprint(u.Port))); err != nil {
			return nil, err
		}
		host, port, _ := net.SplitHostPort(b.proxy.Addr())
		u.Host = host
		fmt.Sscan(port, &u.Port)
		dial := u.String()
		b.topic = "idem.verify." + run
		admin, err := amqp.Dial(dial)
		if err != nil {
			return nil, fmt.Errorf("--broker %s: %w", redactURL(raw), err)
		}
		b.cleanup = append(b.cleanup, func() { admin.Close() })
		if err := idemamqp.DeclareQueue(admin, b.topic, idemamqp.QueueConfig{Quorum: true}); err != nil {
			return nil, fmt.Errorf("--broker %s: %w", redactURL(raw), err)
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

	default:
		return nil, fmt.Errorf("--broker %q: unknown broker; use nats: (embedded), nats://host:4222, kafka: (in-process), "+
			"kafka://host:9092, redis://host:6379 (Streams) or amqp://user:pass@host:5672/", redactURL(raw))
	}
	ok = true
	return b, nil
}

func (b *verifyBroker) proxyTo(name, addr string) error {
	p, err := chaos.NewProxy(name, addr)
	if err != nil {
		return err
	}
	b.proxy = p
	b.cleanup = append(b.cleanup, p.Close)
	return nil
}
