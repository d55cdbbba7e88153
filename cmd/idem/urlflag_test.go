package main

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/internal/redact"
	"github.com/idemhq/idem/internal/testsvc"
)

const urlSecret = "Tok3nS3cr3tXyZ"

// leakShapes are the ways a credential sits in a URL that leaked: a token or key as
// the user name alone, a password holding a character URL parsers split at (# / ?
// @ %; after digits, the parser takes the piece for a port and the URL parses), and
// a URL that does not parse. host is where a URL that parses right would connect.
func leakShapes(scheme, host string) map[string]string {
	s, p := urlSecret, scheme+"://"
	return map[string]string{
		"token-only userinfo":          p + s + "@" + host,
		"user name, empty password":    p + s + ":@" + host,
		"password with #":              p + "app:" + s + "#x@" + host + "/db",
		"password with # after digits": p + "app:1234#" + s + "@" + host + "/db",
		"password with /":              p + "app:a/" + s + "@" + host + "/db",
		"password with / after digits": p + "app:99/" + s + "@" + host + "/db",
		"token with /":                 p + s + "/x@" + host,
		"password with ?":              p + "app:" + s + "?x@" + host + "/db",
		"password with ? after digits": p + "app:77?" + s + "@" + host + "/db",
		"password with @":              p + "app:" + s + "@x@" + host + "/db",
		"password with a bad % escape": p + "app:%zz" + s + "@" + host + "/db",
		"password with % escapes":      p + "app:" + url.PathEscape(s+"#/?@%") + "@" + host + "/db",
		"unparsable":                   p + "app:" + s + "@" + host + ":x/db",
	}
}

// urlUse is one place the CLI reads a URL: try does what the command does with it
// (parse, describe, connect), and returns what it would print and the errors.
type urlUse struct {
	name    string
	schemes []string
	try     func(ctx context.Context, t *testing.T, raw string) (printed []string, errs []error)
}

var urlUses = []urlUse{
	{"serve --store", []string{"postgres", "postgresql", "mysql", "sqlite", "redis", "rediss", "redis-cluster"},
		func(ctx context.Context, t *testing.T, raw string) ([]string, []error) {
			s, err := open.ParseStore(raw)
			if err != nil || s.Kind == "sqlite" { // a SQLite file would be created
				return []string{s.Desc}, []error{err}
			}
			_, closeStore, err := s.Open(ctx, prometheus.NewRegistry())
			if err == nil {
				closeStore()
			}
			return []string{s.Desc}, []error{err}
		}},
	{"relay and admin --db", []string{"postgres", "postgresql", "mysql", "sqlite"},
		func(ctx context.Context, t *testing.T, raw string) ([]string, []error) {
			d, err := open.ParseDB(raw)
			return []string{d.Desc}, []error{err}
		}},
	{"migrate, keys, dlq, outbox, sagas --db", []string{"postgres", "postgresql", "mysql"},
		func(ctx context.Context, t *testing.T, raw string) ([]string, []error) {
			_, closeDB, err := open.SQLDB(ctx, raw)
			if err == nil {
				closeDB()
			}
			return nil, []error{err}
		}},
	{"verify --db", []string{"postgres", "postgresql", "mysql"},
		func(ctx context.Context, t *testing.T, raw string) ([]string, []error) {
			db, err := open.VerifyDatabase(ctx, raw, false)
			if err == nil {
				db.Close()
			}
			return nil, []error{err}
		}},
	{"relay --sink", []string{"nats", "tls", "kafka", "redis", "rediss", "amqp", "amqps", "http", "https", "pubsub", "sqs"},
		func(ctx context.Context, t *testing.T, raw string) ([]string, []error) {
			o := &open.SinkFlags{WebhookSecret: strings.Repeat("k", 32), WebhookTimeout: 5 * time.Second, AMQPMandatory: true}
			s, err := open.ParseSink(raw, o)
			if err != nil || !slices.Contains([]string{"nats", "redis", "amqp", "webhook"}, s.Kind) {
				return []string{s.Desc}, []error{err}
			}
			sink, closeSink, err := s.Open(ctx, o)
			if err == nil {
				err = sink.Publish(ctx, idem.Message{ID: "m-1", Topic: "t"})
				closeSink()
			}
			return []string{s.Desc}, []error{err}
		}},
	{"verify --broker", []string{"nats", "kafka", "redis", "rediss", "amqp", "amqps"},
		func(ctx context.Context, t *testing.T, raw string) ([]string, []error) {
			b, err := open.VerifyBroker(ctx, raw, "leak", slog.New(slog.DiscardHandler))
			if err != nil {
				return nil, []error{err}
			}
			defer b.Close()
			return []string{b.Name()}, nil
		}},
	{"serve --upstream", []string{"http", "https"},
		func(ctx context.Context, t *testing.T, raw string) ([]string, []error) {
			fs, o := NewMain(nil, nil).serveFlags()
			if err := fs.Parse([]string{"--upstream", raw, "--store", "memory:"}); err != nil {
				t.Fatal(err)
			}
			spec, err := o.check()
			if err != nil {
				return nil, []error{err}
			}
			return []string{redact.URL(spec.upstream.String())}, nil // what serve prints at start
		}},
	{"$OTEL_EXPORTER_OTLP_ENDPOINT", []string{"http", "https"},
		func(ctx context.Context, t *testing.T, raw string) ([]string, []error) {
			e, err := cli.TraceExportFromEnv(func(name string) string { return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": raw}[name] })
			if err != nil {
				return nil, []error{err}
			}
			return []string{e.Target()}, nil
		}},
}

// A credential in any URL the CLI reads, in any of the shapes that leaked, appears
// neither in what the command prints (the relay's and serve's start lines, a
// store's or a broker's description) nor in any error it returns, whichever step
// fails: parsing, describing, connecting, publishing.
func TestURLFlagsHideCredentials(t *testing.T) {
	t.Parallel()
	closed := testsvc.ClosedAddr(t)
	for _, use := range urlUses {
		t.Run(use.name, func(t *testing.T) {
			t.Parallel()
			for _, scheme := range use.schemes {
				for shape, raw := range leakShapes(scheme, closed) {
					if shape == "token-only userinfo" || shape == "user name, empty password" {
						if scheme == "postgres" || scheme == "postgresql" || scheme == "mysql" {
							continue // a database's user name is a role, not a secret: its driver names it
						}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					printed, errs := use.try(ctx, t, raw)
					cancel()
					for _, p := range printed {
						if strings.Contains(p, urlSecret) {
							t.Errorf("%s %s (%s): prints %q", use.name, scheme, shape, p)
						}
					}
					for _, err := range errs {
						if err != nil && strings.Contains(err.Error(), urlSecret) {
							t.Errorf("%s %s (%s): error %q", use.name, scheme, shape, err)
						}
					}
				}
			}
		})
	}
}

// A URL whose userinfo a parser would split at the wrong place is refused before
// anything connects, with an *idem.InputError naming the flag and the fix, and
// without the parser's words.
func TestCheckURLRefusesMisreadURLs(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"postgres://app:99/" + urlSecret + "@db/orders",
		"redis://:1234#" + urlSecret + "@cache:6379",
		"amqps://guest:77?" + urlSecret + "@mq/",
		"nats://a:4222,nats://" + urlSecret + "/x@b:4222",
		"https://" + urlSecret + "/x@hooks.example.com/in",
		"https://hooks.example.com/in?email=a@b.example",
		"redis-cluster://u:%zz" + urlSecret + "@h:6379",
	} {
		err := cli.CheckURL("--sink", raw)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != "--sink" || !strings.Contains(ie.Fix, "%23") ||
			strings.Contains(err.Error(), urlSecret) || strings.Contains(err.Error(), "invalid") {
			t.Errorf("cli.CheckURL(%q) = %v, want an InputError on --sink with the fix, without the secret or a parser's words", raw, err)
		}
	}
	for _, raw := range []string{"postgres://app:" + url.PathEscape("a/b#c") + "@db/orders", "nats://t0k@a:4222,nats://t0k@b:4222",
		"https://hooks.example.com/in?email=a%40b.example", "sqlite:./a#b.db", "memory:", "nats:", "kafka://h1:9092,h2:9092"} {
		if err := cli.CheckURL("--sink", raw); err != nil {
			t.Errorf("cli.CheckURL(%q) = %v, want it accepted", raw, err)
		}
	}
}

// The relay's start line names its sink without the NATS token of nats://TOKEN@host
// (a server without authorization accepts the token and ignores it).
func TestRelayStartHidesNATSToken(t *testing.T) {
	t.Parallel()
	path, _, _ := sqliteOutbox(t, "orders.created")
	u, err := url.Parse(natsURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(urlSecret)
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", u.String(), "--poll", "50ms")
	testsvc.Eventually(t, time.Minute, "the relay's start line", func() bool { return strings.Contains(r.stderr.String(), "relaying") })
	r.stop(t)
	if log := r.stderr.String(); strings.Contains(log, urlSecret) || !strings.Contains(log, "nats://xxxxx@"+u.Host) {
		t.Errorf("the relay printed the token, or not its sink:\n%s", log)
	}
}
