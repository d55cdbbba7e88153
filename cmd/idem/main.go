// Command idem runs idem's daemons and checks: verify (the end-to-end proof under
// faults), bench (store figures beside raw baselines), serve (HTTP idempotency
// gateway), relay (outbox relay), migrate (idem's SQL schema), admin (the operator
// API and web console), and keys, dlq, outbox and sagas (the same operations from a
// shell).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/internal/redact"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// go-redis logs its pool's dial failures to a global logger of its own.
	redis.SetLogger(redisLogger{})
	err := NewMain(os.Stdout, os.Stderr).Run(ctx, os.Args[1:])
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		var fail *exitError
		if !errors.As(err, &fail) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(exitCode(err)) // 3 not found, 4 conflict (ops.go)
	}
}

// redisLogger writes go-redis's log lines to stderr, redacted.
type redisLogger struct{}

func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	fmt.Fprintln(os.Stderr, "redis: "+redact.String(fmt.Sprintf(format, v...)))
}

// errUsage marks a command line that could not be parsed; the message was printed.
var errUsage = errors.New("usage")

// exitError is a failure already reported on the output (verify's table), which main
// turns into a non-zero exit without printing it again.
type exitError struct{ msg string }

func (e *exitError) Error() string { return e.msg }

// Main is the CLI, kept free of os.Exit and globals so tests can run it.
type Main struct {
	Stdout, Stderr io.Writer
}

// NewMain returns a Main writing to the given streams.
func NewMain(stdout, stderr io.Writer) *Main { return &Main{Stdout: stdout, Stderr: stderr} }

type command struct {
	name, summary string
	run           func(m *Main, ctx context.Context, args []string) error
}

var commands = []command{
	{"verify", "run an exactly-once flow under injected faults and prove nothing was lost or doubled", (*Main).runVerify},
	{"bench", "measure store throughput beside raw baselines (SET NX, INSERT … ON CONFLICT)", (*Main).runBench},
	{"serve", "HTTP Idempotency-Key gateway: a reverse proxy that runs each keyed POST once and replays it", (*Main).runServe},
	{"relay", "publish the transactional outbox to NATS, Kafka, Redis, RabbitMQ or a webhook", (*Main).runRelay},
	{"migrate", "apply, roll back, show or print idem's SQL schema (up, down, status, print)", (*Main).runMigrate},
	{"keys", "list, show or evict the idempotency records of a store (list, get, evict, scope)", (*Main).runKeys},
	{"dlq", "list, show, replay or discard the inbox's dead letters (list, show, replay, discard)", (*Main).runDLQ},
	{"outbox", "outbox backlog, parked messages and relays (status, parked, retry, discard)", (*Main).runOutbox},
	{"sagas", "list, show, retry, resolve or purge sagas (list, show, retry, resolve, purge)", (*Main).runSagas},
	{"admin", "operator API: inspect and act on keys, dead letters, outbox, effects and sagas", (*Main).runAdmin},
	{"version", "print the version, VCS revision and Go version of this build", (*Main).runVersion},
}

// Run executes the command named by args[0]. What it writes to Stderr and the
// error it returns pass through redact: a password or a secret query value in a
// URL that a driver quoted never reaches a terminal or a log collector.
func (m *Main) Run(ctx context.Context, args []string) error {
	rm := *m
	rm.Stderr = redactWriter{m.Stderr}
	return redact.Error(rm.run(ctx, args))
}

// redactWriter passes each Write through redact.String. Every message and log
// line of the commands is written whole, in one call.
type redactWriter struct{ w io.Writer }

func (r redactWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, redact.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (m *Main) run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		m.usage()
		if len(args) == 0 {
			return errUsage
		}
		return flag.ErrHelp
	}
	if args[0] == "--version" || args[0] == "-version" {
		return m.runVersion(ctx, nil)
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(m, ctx, args[1:])
		}
	}
	fmt.Fprintf(m.Stderr, "idem: unknown command %q\n\n", args[0])
	m.usage()
	return errUsage
}

func (m *Main) usage() {
	fmt.Fprint(m.Stderr, `idem makes the effects of messages and requests happen exactly once.

Usage:
  idem <command> [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(m.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(m.Stderr, `
Run 'idem <command> --help' for the flags of a command.
Quick start: go run ./cmd/idem verify
`)
}

// newFlagSet returns a flag set for a command that reports usage on m.Stderr.
func (m *Main) newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(m.Stderr, "Usage: idem %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, mapping a bad command line to errUsage.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}
