package redact_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/redact"
)

const secret = "S3cr3tPa55"

// Every scheme idem parses, and the text drivers wrap around them.
var cases = []struct {
	in, keep string // keep: what must survive, to keep the message useful
}{
	{"postgres://app:" + secret + "@db.internal:5432/orders", "postgres://app:xxxxx@db.internal:5432/orders"},
	{"postgresql://app:" + secret + "@db/orders?sslmode=require", "sslmode=require"},
	{"postgres://app@db/orders?password=" + secret, "postgres://app@db/orders"},
	{"host=db user=app password=" + secret + " dbname=orders", "host=db user=app"},
	{"host=db password='" + secret + " x' dbname=orders", "dbname=orders"},
	{"redis://:" + secret + "@cache:6379/0", "cache:6379/0"},
	{"rediss://default:" + secret + "@cache:6380", "rediss://default:xxxxx@cache:6380"},
	{"amqp://guest:" + secret + "@mq:5672/vhost", "amqp://guest:xxxxx@mq:5672/vhost"},
	{"amqps://guest:" + secret + "@mq:5671/", "mq:5671"},
	{"nats://u:" + secret + "@nats:4222", "nats:4222"},
	{"tls://u:" + secret + "@nats:4222", "nats:4222"},
	{"kafka://u:" + secret + "@k1:9092,k2:9092", "k2:9092"},
	{"u:" + secret + "@k1:9092", "k1:9092"},
	{"mysql://root:" + secret + "@tcp(db:3306)/app", "mysql://"},
	{"https://hooks.example.com/in?secret=" + secret + "&topic=x", "topic=x"},
	{"https://hooks.example.com/in?token=" + secret, "hooks.example.com/in"},
	{"https://hooks.example.com/in?access_token=" + secret, "hooks.example.com"},
	{"https://hooks.example.com/in?key=" + secret, "hooks.example.com"},
	{"https://hooks.example.com/in?X-Amz-Signature=" + secret, "hooks.example.com"},
	{"https://u:" + secret + "@hooks.example.com/in", "https://u:xxxxx@hooks.example.com/in"},
	{"postgres://app:" + secret + "@db:notaport/orders", "postgres://"},
	{"postgres://app:p@ss/" + secret + "@db/orders", "db/orders"},
	{`Post "https://h/in?token=` + secret + `": dial tcp: connection refused`, "connection refused"},
	{"cannot parse `postgres://app:" + secret + "@db:x/o`: invalid port", "invalid port"},
	{"dial redis://:" + secret + "@cache:6379.", "cache:6379."},
	{"sqlite:app.db?_auth_pass=" + secret, "sqlite:app.db?_auth_pass="},
}

func TestString(t *testing.T) {
	t.Parallel()
	for _, c := range cases {
		got := redact.String(c.in)
		if strings.Contains(got, secret) || !strings.Contains(got, c.keep) {
			t.Errorf("String(%q) = %q, want no secret and %q", c.in, got, c.keep)
		}
		if u := redact.URL(c.in); strings.Contains(u, secret) {
			t.Errorf("URL(%q) = %q, want no secret", c.in, u)
		}
	}
}

// What holds nothing secret passes unchanged.
func TestStringKeepsHarmlessText(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"sqlite:./app.db",
		"file:/var/lib/app.db?_pragma=busy_timeout(10000)",
		"postgres://app@db:5432/orders?sslmode=require",
		"mysql://root@db:3306/orders",
		"postgres://user@host:5432/db",
		"nats://127.0.0.1:4222",
		"dial tcp 127.0.0.1:5432: connect: connection refused",
		"design=1 signal=2 keyboard=3 monkey=4",
		"effect a/b: token 3 was taken over",
		"webhook returned 500",
		"use postgres://user:pass@host:5432/db or amqp://guest:guest@127.0.0.1:5672/",
	} {
		if got := redact.String(s); got != s {
			t.Errorf("String(%q) = %q, want it unchanged", s, got)
		}
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	base := errors.New("base")
	err := redact.Error(fmt.Errorf("connect postgres://u:%s@h/db: %w", secret, base))
	if strings.Contains(err.Error(), secret) || !errors.Is(err, base) {
		t.Errorf("Error = %q (Is base: %v), want no secret and the chain kept", err, errors.Is(err, base))
	}
	if redact.Error(base) != base || redact.Error(nil) != nil {
		t.Error("Error changed an error with nothing to hide")
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(redact.Handler(slog.NewTextHandler(&buf, nil)))
	log = log.With("sink", "amqp://g:"+secret+"@mq/")
	log.WithGroup("g").Warn("dial redis://:"+secret+"@h:6379 failed",
		"err", errors.New("Post \"https://h/?token="+secret+"\": refused"),
		slog.Group("db", "dsn", "host=h password="+secret),
		"n", 3)
	if out := buf.String(); strings.Contains(out, secret) || !strings.Contains(out, "n=3") {
		t.Errorf("log output %q, want no secret and the other attributes", out)
	}
}

// FuzzString builds URLs and DSNs around a password and checks that no output
// holds it, however the rest of the text looks.
func FuzzString(f *testing.F) {
	f.Add("postgres", "app", "db:5432/orders", "sslmode=require", "Hunter2Hunter2", "connect ")
	f.Add("redis", "", "cache:6379", "", "p@ss/w:rd?#", "")
	f.Add("kafka", "u", "k1:9092,k2:9092", "", "S3cret%20x", "dial: ")
	f.Add("https", "tok", "hooks.example.com/in", "topic=a", "s e c r e t!", `Post "`)
	f.Fuzz(func(t *testing.T, scheme, user, rest, query, pw, prefix string) {
		if len(pw) < 8 || placeholderLike(pw) {
			return
		}
		enc := url.UserPassword(user, pw).String() // the escaped form a URL holds
		for _, s := range []string{
			prefix + scheme + "://" + enc + "@" + rest + "?" + query,
			prefix + scheme + "://" + user + "@" + rest + "?" + query + "&password=" + url.QueryEscape(pw),
			prefix + scheme + "://" + rest + "?token=" + url.QueryEscape(pw) + "&" + query,
			prefix + "host=h password='" + strings.ReplaceAll(pw, "'", "") + "' user=u",
		} {
			got := redact.String(s)
			for _, form := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw), enc} {
				if len(form) >= 8 && strings.Contains(got, form) && !strings.Contains(prefix+scheme, form) {
					t.Fatalf("String(%q) = %q still holds %q", s, got, form)
				}
			}
		}
	})
}

func placeholderLike(pw string) bool {
	return strings.ContainsAny(pw, " \t\n\"'`<>") || pw == "password"
}

// The usage texts of the CLI quote URL forms with placeholders: they pass as they are.
func TestStringKeepsUsageForms(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"use kafka://host:9092[,host:9092]",
		"use sqs://?region=eu-west-1 or sqs://host:port",
		"use redis-cluster://host:6379[?addr=host2:6379&addr=host3:6379][&prefix=idem:]",
		"use http://host:port[/base-path]",
	} {
		if got := redact.String(s); got != s {
			t.Errorf("String(%q) = %q, want it unchanged", s, got)
		}
	}
}
