// Package cli is the kit every idem subcommand shares: flag sets whose errors name
// the flag and the closest one a typo meant, the usage error and exit codes, the
// checks of URL and file flags that never quote a credential, and what a daemon
// starts beside its work (log, traces, metrics, /healthz).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/idemhq/idem/internal/redact"
)

// ErrUsage marks a command line that could not be parsed; the message was printed.
// main exits 2.
var ErrUsage = errors.New("usage")

// ExitError is a failure already reported on the output (verify's table), which
// main turns into a non-zero exit without printing it again.
type ExitError struct{ Msg string }

func (e *ExitError) Error() string { return e.Msg }

// NewFlagSet returns the flag set of `idem name`: it reports errors on stderr and
// its usage (--help), with synopsis, on help.
func NewFlagSet(name, synopsis string, stderr, help io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(help, "Usage: idem %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		PrintFlags(fs, help)
	}
	return fs
}

// PrintFlags writes fs's flags and their defaults to help. The usage texts are
// idem's own; a default may come from the environment (verify's $IDEM_DB), so
// each default is redacted.
func PrintFlags(fs *flag.FlagSet, help io.Writer) {
	fs.VisitAll(func(f *flag.Flag) { f.DefValue = redact.String(f.DefValue) })
	out := fs.Output()
	fs.SetOutput(help)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// Parse parses args, mapping a bad command line to ErrUsage. --help prints the
// command's usage; a bad flag prints two lines, not the usage (which would scroll
// the error away): the error, naming the flag, with the closest flag the command
// has when one is near, and where the usage is.
func Parse(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		usage()
		return err
	}
	if err != nil {
		fmt.Fprintf(out, "%s: %s\nrun '%s --help' for usage\n", fs.Name(), FlagProblem(fs, err), fs.Name())
		return ErrUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return ErrUsage
	}
	return nil
}

// UsageErr prints "idem <command>: <message>" on fs's output and returns ErrUsage:
// a flag's value, refused after parsing.
func UsageErr(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(fs.Output(), fs.Name()+": "+format+"\n", args...)
	return ErrUsage
}

// EnvOr returns $name, or def when it is unset or empty.
func EnvOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// ApplyEnv sets every flag that the command line left alone from $IDEM_<FLAG>, if
// present (an empty value counts: IDEM_ADMIN_LISTEN= turns the admin listener off).
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "IDEM_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v, ok := lookup(name)
		if given[f.Name] || !ok || err != nil {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("$%s (--%s) = %q: %v", name, f.Name, v, serr)
		}
	})
	return err
}

// RedactWriter passes each Write through redact.String. Every message and log
// line of the commands is written whole, in one call.
type RedactWriter struct{ W io.Writer }

func (r RedactWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.W, redact.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
