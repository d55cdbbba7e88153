// Command idem runs idem's daemons and checks: verify (the end-to-end proof under
// faults), bench (store figures beside raw baselines), serve (HTTP idempotency
// gateway), relay (outbox relay), audit (a live flow's end-to-end audit and
// repair), migrate (idem's SQL schema), admin (the operator API and web console),
// and keys, dlq, outbox, queue and sagas (the same operations from a shell).
//
// This package is the command line: flag dispatch, exit codes and one file (or a
// few) per subcommand that maps its flags to the packages doing the work. Those
// are idemhttp/gateway (what serve runs, importable), internal/cli (the kit every
// subcommand shares: flag sets and their errors, URL flags, a daemon's log, traces,
// metrics and /healthz), internal/open (the URL flags' parsers and openers: stores,
// databases, sinks, verify's brokers), internal/operator (keys, dlq, outbox, queue and
// sagas), internal/relay (the relay's health and serving loop) and
// internal/verify (the verify run).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/operator"
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
	case errors.Is(err, cli.ErrUsage):
		os.Exit(2)
	default:
		var fail *cli.ExitError
		if !errors.As(err, &fail) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(operator.ExitCode(err)) // 3 not found, 4 conflict
	}
}

// redisLogger writes go-redis's log lines to stderr, redacted.
type redisLogger struct{}

func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	fmt.Fprintln(os.Stderr, "redis: "+redact.String(fmt.Sprintf(format, v...)))
}

// Main is the CLI, kept free of os.Exit and globals so tests can run it.
type Main struct {
	Stdout, Stderr io.Writer
	// rawStderr is Stderr before Run's redaction: the usage texts are printed on
	// it as written (a redactor would mask "user:pw@" in an example), their flags'
	// default values redacted one by one (printFlags); and verify asks whether it
	// is a terminal. Nil: Stderr.
	rawStderr io.Writer
	// terminal reports whether w is a terminal (verify's progress line); nil:
	// verify.IsTerminal. Tests set it.
	terminal func(w io.Writer) bool
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
	{"audit", "reconcile what the outbox published with what each consumer applied; repair what is missing", (*Main).runAudit},
	{"migrate", "apply, roll back, show or print idem's SQL schema (up, down, status, print)", (*Main).runMigrate},
	{"keys", "list the scopes and records of a store, show or evict one (scopes, list, get, evict, scope)", (*Main).runKeys},
	{"dlq", "list, show, replay or discard the inbox's dead letters (list, show, replay, discard)", (*Main).runDLQ},
	{"outbox", "outbox backlog, parked messages and relays (status, parked, retry, discard)", (*Main).runOutbox},
	{"queue", "the database as the queue: messages per topic and state, listed, cancelled (status, list, cancel)", (*Main).runQueue},
	{"sagas", "list, show, retry, resolve or purge sagas (list, show, retry, resolve, purge)", (*Main).runSagas},
	{"admin", "operator API: inspect and act on keys, dead letters, outbox, queue, effects and sagas", (*Main).runAdmin},
	{"version", "print the version, VCS revision and Go version of this build", (*Main).runVersion},
}

// Run executes the command named by args[0]. What it writes to Stderr and the
// error it returns pass through redact: a password or a secret query value in a
// URL that a driver quoted never reaches a terminal or a log collector.
func (m *Main) Run(ctx context.Context, args []string) error {
	rm := *m
	rm.Stderr, rm.rawStderr = cli.RedactWriter{W: m.Stderr}, m.Stderr
	return redact.Error(rm.run(ctx, args))
}

func (m *Main) run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		m.usage()
		if len(args) == 0 {
			return cli.ErrUsage
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
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	fmt.Fprintf(m.Stderr, "idem: unknown command %q%s\nrun 'idem --help' for the commands\n", args[0], cli.DidYouMean(args[0], names, ""))
	return cli.ErrUsage
}

func (m *Main) usage() {
	fmt.Fprint(m.help(), `idem makes the effects of messages and requests happen exactly once.

Usage:
  idem <command> [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(m.help(), "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(m.help(), `
Run 'idem <command> --help' for the flags of a command.
`)
	exe, _ := os.Executable()
	fmt.Fprintf(m.help(), "Quick start: %s\n", quickStart(exe))
}

// help is where usage texts go: Stderr, unredacted.
func (m *Main) help() io.Writer {
	if m.rawStderr != nil {
		return m.rawStderr
	}
	return m.Stderr
}

// printFlags writes fs's flags and their defaults, redacted, to m.help().
func (m *Main) printFlags(fs *flag.FlagSet) { cli.PrintFlags(fs, m.help()) }

// quickStart is the command that runs verify from this binary: "go run ./cmd/idem
// verify" when it was built by go run (so the README's command is the one shown),
// "idem verify" for an installed or built binary.
func quickStart(exe string) string {
	if builtByGoRun(exe) {
		return "go run ./cmd/idem verify"
	}
	return "idem verify"
}

// builtByGoRun reports whether exe is a binary go run built: it lies in a
// directory named exe under go's temporary go-build… work directory
// ($TMPDIR/go-build123/b001/exe/idem).
func builtByGoRun(exe string) bool {
	dir := filepath.Dir(exe)
	if filepath.Base(dir) != "exe" {
		return false
	}
	for d := filepath.Dir(dir); d != filepath.Dir(d); d = filepath.Dir(d) {
		if strings.HasPrefix(filepath.Base(d), "go-build") {
			return true
		}
	}
	return false
}

// newFlagSet returns a flag set for a command that reports errors on m.Stderr and
// its usage (--help) on m.help().
func (m *Main) newFlagSet(name, synopsis string) *flag.FlagSet {
	return cli.NewFlagSet(name, synopsis, m.Stderr, m.help())
}
