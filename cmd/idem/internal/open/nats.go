package open

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/idemhq/idem/internal/redact"
)

// connectNATS connects to the NATS server at url and opens JetStream on the
// connection.
func connectNATS(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// openNATSSink is relay's --sink nats://… (tls://…): JetStream, with the stream of
// --nats-stream created or updated first.
func openNATSSink(ctx context.Context, s SinkSpec, o *SinkFlags) (idem.Sink, func(), error) {
	nc, js, err := connectNATS(s.Raw, nats.Name("idem relay"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, sinkDown(s, err)
	}
	if o.NATSStream != "" {
		var subjects []string
		for _, subj := range strings.Split(o.NATSSubjects, ",") {
			if subj = strings.TrimSpace(subj); subj != "" {
				subjects = append(subjects, subj)
			}
		}
		_, err = idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: o.NATSStream, Subjects: subjects})
	}
	var sink idem.Sink
	if err == nil {
		sink, err = idemnats.NewSink(js, idemnats.SinkConfig{})
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("--sink %s: %w", s.Desc, redact.Error(err))
	}
	return sink, nc.Close, nil
}

// openNATSBroker is verify's --broker nats:[//host:4222]: an embedded server when
// no address is given, the run's own stream, every connection through a
// chaos.Proxy.
func openNATSBroker(ctx context.Context, b *Broker, raw, run string, logger *slog.Logger) error {
	_, rest, _ := strings.Cut(raw, ":")
	addr, user := strings.TrimPrefix(rest, "//"), ""
	if u, err := url.Parse(raw); err == nil && u.Host != "" { // checkURL refused what does not parse
		addr = u.Host
		if u.User != nil {
			user = u.User.String() + "@" // a token, or user:password: kept for the proxied connections
		}
	}
	b.name = "nats " + addr
	if addr == "" {
		var err error
		if addr, err = b.embedNATS(); err != nil {
			return err
		}
		b.name = "nats (embedded)"
	}
	if err := b.proxyTo("nats", addr); err != nil {
		return err
	}
	connect := verifyNATSConnect("nats://"+user+b.proxy.Addr(), redact.URL(raw), logger)
	js, stream, err := b.natsConnect(connect, run)
	if err != nil {
		return err
	}
	if err := b.natsStream(ctx, js, stream); err != nil {
		return fmt.Errorf("--broker %s: %w", redact.URL(raw), redact.Error(err))
	}
	b.natsOpeners(connect, stream)
	return nil
}

// natsConnect connects b's first client with connect, closed at b's cleanup, and
// names the stream and the topic of run.
func (b *Broker) natsConnect(connect func() (*nats.Conn, jetstream.JetStream, error), run string) (jetstream.JetStream, string, error) {
	stream := "IDEM_VERIFY_" + strings.ToUpper(run)
	b.topic = "idem.verify." + run + ".orders"
	nc, js, err := connect()
	if err != nil {
		return nil, "", err
	}
	b.cleanup = append(b.cleanup, nc.Close)
	return js, stream, nil
}

// verifyNATSConnect returns how verify's clients connect to servers: a fresh
// connection each (sinks and sources are restarted on their own), reconnecting
// without end, errors logged.
func verifyNATSConnect(servers, raw string, logger *slog.Logger) func() (*nats.Conn, jetstream.JetStream, error) {
	return func() (*nats.Conn, jetstream.JetStream, error) {
		nc, js, err := connectNATS(servers, nats.Name("idem verify"), nats.MaxReconnects(-1),
			nats.ReconnectWait(20*time.Millisecond), nats.ReconnectJitter(10*time.Millisecond, 10*time.Millisecond),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { logger.Warn("nats", "err", err) }))
		if err != nil {
			return nil, nil, fmt.Errorf("--broker %s: %w", raw, redact.Error(err))
		}
		return nc, js, nil
	}
}

// natsOpeners sets b's sink and source openers on stream, each on a connection of
// its own that closes with it.
func (b *Broker) natsOpeners(connect func() (*nats.Conn, jetstream.JetStream, error), stream string) {
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
		return &ownedSink{s, natsCloser(nc)}, nil
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
		return keepingSource{&ownedSource{s, natsCloser(nc)}, s}, nil
	}
}

// natsStream creates the run's stream over b.topic, deleted by b.close, and
// counts the messages it stores.
func (b *Broker) natsStream(ctx context.Context, js jetstream.JetStream, name string) error {
	st, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: name, Subjects: []string{b.topic}})
	if err != nil {
		return err
	}
	b.cleanup = append(b.cleanup, func() { _ = js.DeleteStream(context.Background(), name) })
	b.stored = func(ctx context.Context) (int, bool) {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, false
		}
		return int(info.State.Msgs), true
	}
	return nil
}

// embedNATS starts an embedded NATS server with JetStream in a temporary
// directory, both removed by b.close, and returns its address.
func (b *Broker) embedNATS() (string, error) {
	dir, err := os.MkdirTemp("", "idem-verify-nats-")
	if err != nil {
		return "", err
	}
	b.cleanup = append(b.cleanup, func() { os.RemoveAll(dir) })
	srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: dir})
	if err != nil {
		return "", fmt.Errorf("--broker nats: start the embedded server: %w", err)
	}
	b.cleanup = append(b.cleanup, srv.Shutdown)
	u, _ := url.Parse(srv.ClientURL())
	return u.Host, nil
}

func natsCloser(nc *nats.Conn) closer {
	return closer{[]func() error{func() error { nc.Close(); return nil }}}
}
