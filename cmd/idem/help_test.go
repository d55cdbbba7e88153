package main

import (
	"errors"
	"flag"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
)

// helps returns the --help of every command and action the dispatcher knows,
// through Run (so through its redaction), by name ("keys list").
func helps(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range commands {
		_, stderr, err := run(t, c.name, "--help")
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s --help: %v\n%s", c.name, err, stderr)
		}
		out[c.name] = stderr
		for _, a := range actions(stderr, c.name) {
			_, stderr, err := run(t, c.name, a, "--help")
			if !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("%s %s --help: %v\n%s", c.name, a, err, stderr)
			}
			out[c.name+" "+a] = stderr
		}
	}
	return out
}

// actions reads the actions of a command from its usage line, as the dispatcher
// prints it: "Usage: idem keys scopes|list|get|evict|scope [flags]".
func actions(help, name string) []string {
	m := regexp.MustCompile(`Usage: idem ` + name + ` (\S+\|\S+) \[flags\]`).FindStringSubmatch(help)
	if m == nil {
		return nil
	}
	return strings.Split(m[1], "|")
}

// TestTopHelpListsEverySubcommand: every command of the dispatcher has its line in
// `idem --help`, and that line names every action the command's own usage lists
// (keys scopes was missing).
func TestTopHelpListsEverySubcommand(t *testing.T) {
	t.Parallel()
	_, top, err := run(t, "--help")
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help returned %v", err)
	}
	for _, c := range commands {
		line := regexp.MustCompile(`(?m)^  ` + c.name + ` .*$`).FindString(top)
		if line == "" {
			t.Errorf("idem --help has no line for %q:\n%s", c.name, top)
			continue
		}
		_, help, _ := run(t, c.name, "--help")
		for _, a := range actions(help, c.name) {
			if !regexp.MustCompile(`\b` + a + `\b`).MatchString(line) {
				t.Errorf("idem --help's line for %s does not name its action %q: %q", c.name, a, line)
			}
		}
	}
}

// TestHelpPrintsTextAsWritten: the usage texts reach the terminal as written, not
// as the redactor of error output would rewrite them ("…" re-encoded as
// %E2%80%A6, the example user:pw@ masked), while a default value from the
// environment that holds a password is still masked.
func TestHelpPrintsTextAsWritten(t *testing.T) {
	t.Setenv("IDEM_DB", "")
	t.Setenv("IDEM_BROKER", "")
	all := helps(t)
	ellipses := 0
	for name, h := range all {
		if strings.Contains(h, "%E2%80%A6") || strings.Contains(h, "xxxxx") {
			t.Errorf("idem %s --help rewrote its text (%%E2%%80%%A6 or xxxxx):\n%s", name, h)
		}
		ellipses += strings.Count(h, "://…")
	}
	if ellipses == 0 {
		t.Errorf("no help printed a URL form with …: %d helps read", len(all))
	}
	if !strings.Contains(all["serve"], "(http://user:pw@host)") {
		t.Errorf("serve --help lost its example http://user:pw@host:\n%s", all["serve"])
	}
	t.Setenv("IDEM_DB", "postgres://app:s3cretpw@db.internal/app")
	if _, v, _ := run(t, "verify", "--help"); strings.Contains(v, "s3cretpw") || !strings.Contains(v, "db.internal") {
		t.Errorf("verify --help: want the $IDEM_DB default shown with its password masked:\n%s", v)
	}
}

// TestHelpURLExamplesParse: every URL form relay --help and serve --help list for
// --db, --sink and --store is accepted by that flag's parser (sqs:?region= was
// suggested and refused).
func TestHelpURLExamplesParse(t *testing.T) {
	t.Parallel()
	_, relay, _ := run(t, "relay", "--help")
	_, serve, _ := run(t, "serve", "--help")
	_, auditHelp, _ := run(t, "audit", "--help")
	secret := &open.SinkFlags{WebhookSecret: strings.Repeat("s", 32)}
	n := 0
	for _, c := range []struct {
		help, section string
		parse         func(string) error
	}{
		{relay, "Sinks (--sink):", func(raw string) error { _, err := open.ParseSink(raw, secret); return err }},
		{relay, "Databases (--db):", func(raw string) error { _, err := open.ParseDB(raw); return err }},
		{serve, "Stores (--store):", func(raw string) error { _, err := open.ParseStore(raw); return err }},
		{auditHelp, "Databases (--db, the producer's outbox):", func(raw string) error { _, err := open.ParseDB(raw); return err }},
	} {
		examples := sectionExamples(c.help, c.section)
		if len(examples) < 3 {
			t.Fatalf("found %d examples under %q", len(examples), c.section)
		}
		for _, ex := range examples {
			n++
			err := c.parse(ex)
			if strings.HasPrefix(ex, "sqlite:") && err != nil && strings.Contains(err.Error(), "no such file") {
				continue // relay's --db sqlite:PATH must name an existing file
			}
			if err != nil {
				t.Errorf("%s example %q refused: %v", c.section, ex, err)
			}
		}
	}
	t.Logf("%d examples parsed", n)
}

// sectionExamples returns the URL forms in the first column of a help's section,
// from its title to the next blank line: optional parts ([/db], [?prefix=P]) left
// out, PATH and PROJECT given a value.
func sectionExamples(help, title string) []string {
	_, rest, ok := strings.Cut(help, title+"\n")
	if !ok {
		return nil
	}
	section, _, _ := strings.Cut(rest, "\n\n")
	optional := regexp.MustCompile(`\[[^\]]*\]`)
	var out []string
	for _, line := range strings.Split(section, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") || !strings.Contains(fields[0], ":") {
			continue
		}
		ex := optional.ReplaceAllString(fields[0], "")
		ex = strings.NewReplacer("PATH", filepath.Join("no-such-dir", "x.db"), "PROJECT", "my-project").Replace(ex)
		out = append(out, ex)
	}
	return out
}

// TestMistypedFlag: a flag no command has is reported in at most three lines that
// name it, suggest the nearest flag when one is close, and point at --help; the
// usage is not printed (it scrolled the error away). The same for every command,
// since they share newFlagSet and parse.
func TestMistypedFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args    []string
		typed   string
		suggest string
	}{
		{[]string{"relay", "--sinkk", "nats://h:4222"}, "--sinkk", "--sink"},
		{[]string{"verify", "--fault=0.1"}, "--fault", "--fault-rate"},
		{[]string{"serve", "--upstrem", "http://127.0.0.1:1"}, "--upstrem", "--upstream"},
		{[]string{"keys", "list", "--stor", "sqlite:x"}, "--stor", "--store"},
		{[]string{"migrate", "up", "--dbb", "sqlite:x"}, "--dbb", "--db"},
		{[]string{"admin", "--frobnicate"}, "--frobnicate", ""},
	} {
		_, stderr, err := run(t, c.args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		cmd := c.args[0]
		if c.args[0] == "keys" {
			cmd = "keys list"
		}
		switch {
		case !errors.Is(err, cli.ErrUsage):
			t.Errorf("%v: err %v, want cli.ErrUsage (exit 2)", c.args, err)
		case len(lines) > 3:
			t.Errorf("%v: %d lines, want at most 3:\n%s", c.args, len(lines), stderr)
		case !strings.Contains(stderr, "unknown flag "+c.typed):
			t.Errorf("%v: does not name %s:\n%s", c.args, c.typed, stderr)
		case c.suggest != "" && !strings.Contains(stderr, "did you mean "+c.suggest+"?"):
			t.Errorf("%v: does not suggest %s:\n%s", c.args, c.suggest, stderr)
		case c.suggest == "" && strings.Contains(stderr, "did you mean"):
			t.Errorf("%v: suggests a flag that is not near:\n%s", c.args, stderr)
		case !strings.Contains(stderr, "run 'idem "+cmd+" --help' for usage"):
			t.Errorf("%v: does not point at idem %s --help:\n%s", c.args, cmd, stderr)
		}
	}
	if _, stderr, err := run(t, "verfy"); !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr, "did you mean verify?") ||
		strings.Count(stderr, "\n") > 3 {
		t.Errorf("unknown command verfy: err %v, stderr:\n%s", err, stderr)
	}
	// A bad value is quoted by the flag package: through the redacting stderr.
	if _, stderr, err := run(t, "verify", "--ops", "postgres://u:s3cret@h/db"); !errors.Is(err, cli.ErrUsage) ||
		strings.Contains(stderr, "s3cret") || !strings.Contains(stderr, "-ops") || strings.Count(stderr, "\n") != 2 {
		t.Errorf("bad --ops value: err %v, stderr:\n%s", err, stderr)
	}
	if _, stderr, err := run(t, "sagas", "retyr"); !errors.Is(err, cli.ErrUsage) || !strings.HasSuffix(stderr, "; did you mean retry?\n") ||
		strings.Count(stderr, "\n") != 1 {
		t.Errorf("unknown action retyr: err %v, stderr:\n%s", err, stderr)
	}
}

// TestQuickStart: the top help's quick start is the README's `go run ./cmd/idem
// verify` for a binary go run built, `idem verify` for an installed one.
func TestQuickStart(t *testing.T) {
	t.Parallel()
	for exe, want := range map[string]string{
		"/tmp/go-build3641455480/b001/exe/idem":               "go run ./cmd/idem verify",
		"/usr/local/bin/idem":                                 "idem verify",
		"/home/me/go/bin/idem":                                "idem verify",
		"/home/me/exe/idem":                                   "idem verify",
		"/tmp/go-build99/b001/idem.test":                      "idem verify",
		filepath.Join(t.TempDir(), "go-build1/b001/exe/idem"): "go run ./cmd/idem verify",
	} {
		if got := quickStart(exe); got != want {
			t.Errorf("quickStart(%q) = %q, want %q", exe, got, want)
		}
	}
	_, top, _ := run(t, "--help")
	if !strings.Contains(top, "Quick start: idem verify") { // the test binary is not go run's
		t.Errorf("idem --help from a built binary:\n%s", top)
	}
}
